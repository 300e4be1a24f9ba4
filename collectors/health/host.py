"""Host pressure: PSI files (``/proc/pressure/*``, cgroup v2 ``*.pressure``), CPU steal from
``/proc/stat``, and a PCI device's AER counters (``aer_dev_{correctable,nonfatal,fatal}``).

PSI ``avg10/60/300`` are percent of wall time over those windows; ``total`` is cumulative
stall microseconds. Before kernel 5.13 the cpu file has no ``full`` line; ``irq`` has only one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collectors.health.errors import HealthParseError


@dataclass(frozen=True)
class PsiLine:
    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True)
class Psi:
    """One pressure file: the ``some`` and ``full`` lines (None where the kernel prints none)."""

    some: PsiLine | None
    full: PsiLine | None


_PSI = re.compile(r"^(some|full) avg10=(\d+\.\d+) avg60=(\d+\.\d+) avg300=(\d+\.\d+) "
                  r"total=(\d+)$")


def parse_psi(text: str, source: str = "pressure") -> Psi:
    lines: dict[str, PsiLine] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _PSI.match(line)
        if m is None:
            raise HealthParseError("expected 'some|full avg10=F avg60=F avg300=F total=N'",
                                   source=source, line=no)
        lines[m.group(1)] = PsiLine(float(m.group(2)), float(m.group(3)), float(m.group(4)),
                                    int(m.group(5)))
    if not lines:
        raise HealthParseError("empty pressure file (is PSI disabled, psi=0?)", source=source)
    return Psi(lines.get("some"), lines.get("full"))


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``, in clock ticks (USER_HZ)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return (self.user + self.nice + self.system + self.idle + self.iowait + self.irq
                + self.softirq + self.steal)


def parse_proc_stat(text: str, source: str = "/proc/stat") -> CpuTimes:
    """The all-CPU line; ``steal`` is 0 on kernels that print fewer than 8 fields (pre-2.6.11)."""
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("cpu "):
            try:
                f = [int(x) for x in line.split()[1:9]]
            except ValueError:
                raise HealthParseError("the cpu line holds a non-integer", source=source,
                                       line=no) from None
            if len(f) < 4:
                raise HealthParseError(f"the cpu line has {len(f)} fields, expected 4 or more",
                                       source=source, line=no)
            f += [0] * (8 - len(f))
            return CpuTimes(*f)
    raise HealthParseError("no 'cpu ' line", source=source)


def steal_fraction(before: CpuTimes, after: CpuTimes) -> float | None:
    """The share of CPU time stolen by the hypervisor between two readings; None when no time
    passed."""
    dt = after.total - before.total
    return None if dt <= 0 else (after.steal - before.steal) / dt


def parse_aer_counters(text: str, source: str = "aer_dev_correctable") -> dict[str, int]:
    """``<Name with spaces> <count>`` lines → ``{name: count}`` (``TOTAL_ERR_COR`` included)."""
    out = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        name, _, count = line.rpartition(" ")
        if not name or not count.isdigit():
            raise HealthParseError("expected '<error name> <count>'", source=source, line=no)
        out[name] = int(count)
    return out
