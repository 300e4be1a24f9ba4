"""The root of every exception c4 raises, and the errors of the shared layer.

Each part has its own root (``DiagnosisError``, ``CollectorError``, ``PlannerError``,
``RecoveryError``) derived from :class:`C4Error`, so a command can catch one class and print the
message, which says what to fix.
"""

from __future__ import annotations


def locate(message: str, source: str = "", line: int | None = None,
           field: str | None = None) -> str:
    """``message`` prefixed with where in a file it applies: ``file:line (field 'x'): ...``."""
    where = source
    if line is not None:
        where += f":{line}" if where else f"line {line}"
    if field:
        where += f" (field {field!r})" if where else f"field {field!r}"
    return f"{where}: {message}" if where else message


class C4Error(Exception):
    """Root of every error raised by c4's packages."""


class FormatError(C4Error):
    """A malformed input file; the message names the file, the line and the field."""

    def __init__(self, message: str, *, source: str = "", line: int | None = None,
                 field: str | None = None) -> None:
        super().__init__(locate(message, source, line, field))
        #: the message without the place, to raise it again at another (a parser process
        #: numbers the lines of its block from 1)
        self.message = message
        self.source, self.line, self.field = source, line, field
