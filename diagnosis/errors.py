"""The diagnosis package's exceptions: one root, messages that say what to do."""

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


class DiagnosisError(Exception):
    """Root of every error raised by the diagnosis package."""


class FormatError(DiagnosisError):
    """A malformed input file; the message names the file, the line and the field."""

    def __init__(self, message: str, *, source: str = "", line: int | None = None,
                 field: str | None = None) -> None:
        super().__init__(locate(message, source, line, field))
        self.source, self.line, self.field = source, line, field


class StoreError(DiagnosisError):
    """The store cannot be reached or refused an operation."""


class UnknownJobError(DiagnosisError):
    """Telemetry or a query names a job the daemon has never seen."""


class ConfigError(DiagnosisError, ValueError):
    """A daemon setting (flag or ``C4_*`` variable) has a bad value; the message names it."""
