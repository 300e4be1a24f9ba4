"""The one exception of the node-health parsers and samplers."""

from __future__ import annotations

from collectors.errors import CollectorError


class HealthParseError(CollectorError):
    """A health source (nvidia-smi, DCGM, kernel log, sysfs, PSI) printed something this parser
    cannot read; the message names the source, the line and what was expected there."""

    def __init__(self, message: str, *, source: str = "", line: int | None = None) -> None:
        where = source
        if line is not None:
            where += f":{line}" if where else f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.source, self.line = source, line
