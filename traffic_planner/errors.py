"""The traffic planner's exceptions: one root, messages that say what to do."""

from __future__ import annotations

from c4.errors import C4Error, locate


class PlannerError(C4Error):
    """Root of every error raised by the traffic planner."""


class ConfigError(PlannerError, ValueError):
    """A planner setting (a flag, or a config built in code) has a bad value; the message
    names it."""


class FlowFormatError(PlannerError):
    """A malformed flows, plan or fault-report file; the message names the file and field."""

    def __init__(self, message: str, *, source: str = "", field: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(locate(message, source, line, field))
        self.source, self.field, self.line = source, field, line


class NoPathError(PlannerError):
    """Some flow has no path left between its NICs (its links are down)."""

    def __init__(self, message: str, *, flow: str) -> None:
        super().__init__(message)
        self.flow = flow


class UnknownLinkError(PlannerError):
    """A link or node named as down is not in the topology."""
