"""Where c4's commands print: a rich console as wide as the terminal, or as wide as each line
when the output goes to a pipe or a file."""

from __future__ import annotations

from rich.console import Console

# Piped output is read by people who copy ids out of it and by programs that cut columns;
# a wrapped fault id or a cut timestamp breaks both, so lines are as long as they need to be.
PIPED_WIDTH = 100_000


def make_console(*, stderr: bool = False) -> Console:
    """A console for one command's output, chosen at the moment the command runs."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=True)
