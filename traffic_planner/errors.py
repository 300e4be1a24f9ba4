"""The traffic planner's exceptions: one root, messages that say what to do."""

from __future__ import annotations


class PlannerError(Exception):
    """Root of every error raised by the traffic planner."""


class FlowFormatError(PlannerError):
    """A malformed flows, plan or fault-report file; the message names the file and field."""

    def __init__(self, message: str, *, source: str = "", field: str | None = None,
                 line: int | None = None) -> None:
        where = source
        if line is not None:
            where += f":{line}" if where else f"line {line}"
        if field:
            where += f" (field {field!r})" if where else f"field {field!r}"
        super().__init__(f"{where}: {message}" if where else message)
        self.source, self.field, self.line = source, field, line


class NoPathError(PlannerError):
    """Some flow has no path left between its NICs (its links are down)."""

    def __init__(self, message: str, *, flow: str) -> None:
        super().__init__(message)
        self.flow = flow


class UnknownLinkError(PlannerError):
    """A link or node named as down is not in the topology."""
