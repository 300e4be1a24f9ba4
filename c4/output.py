"""Where c4's commands print: a rich console as wide as the terminal, or as wide as each line
when the output goes to a pipe or a file."""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from typing import Any

import typer
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


class Format(str, Enum):
    """``--format`` of every command that prints data."""

    table = "table"
    json = "json"
    jsonl = "jsonl"


FORMAT_HELP = ("table (for people), json (one object: {\"<things>\": [...]}) or jsonl (one "
               "object per line).")


def emit(fmt: Format, key: str, items: Iterable[dict[str, Any]]) -> None:
    """Print records as one JSON object ``{key: [...]}`` or as JSON Lines."""
    if fmt is Format.jsonl:
        for item in items:
            typer.echo(json.dumps(item, separators=(",", ":")))
        return
    typer.echo(json.dumps({key: list(items)}, indent=2))


def emit_object(fmt: Format, doc: dict[str, Any]) -> None:
    """Print one JSON object: indented for ``json``, on one line for ``jsonl`` (so that a
    command printing one thing reads the same way as one printing many)."""
    if fmt is Format.jsonl:
        typer.echo(json.dumps(doc, separators=(",", ":")))
        return
    typer.echo(json.dumps(doc, indent=2))


def message_json(msg: Any) -> dict[str, Any]:
    """A protobuf message as JSON with numbers as numbers (64-bit ones too, which protobuf's
    own JSON writes as strings) and every field present, zeros and empty lists included."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.message_type is not None and not _is_map(fd):
            if _repeated(fd):
                out[fd.name] = [message_json(v) for v in value]
            else:
                out[fd.name] = message_json(value)
        elif _repeated(fd):
            out[fd.name] = list(value)
        else:
            out[fd.name] = value
    return out


def _repeated(fd: Any) -> bool:
    rep = getattr(fd, "is_repeated", None)
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED


def _is_map(fd: Any) -> bool:
    return bool(fd.message_type and fd.message_type.GetOptions().map_entry)
