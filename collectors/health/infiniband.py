"""InfiniBand port health: the whole sysfs port (every ``counters/`` and ``hw_counters/`` file,
``state``, ``phys_state``, ``rate``), ``perfquery -x`` / ``-E`` blocks, ibdiagnet PM dumps and
OpenSM's unhealthy-ports list.

The sidecar's ``port`` records (collectors/sidecar/ports.py) carry the few counters timing
diagnosis needs; this reads all of them, for the rules and the peer model. ``port_xmit_data``
and ``port_rcv_data`` count octets divided by 4 (the kernel ABI); they are kept as read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from collectors.health.errors import HealthParseError

#: sysfs files that are not counters: hw_counters/lifespan is the cache time in ms
_NOT_COUNTERS = frozenset({"lifespan"})


@dataclass
class IbPort:
    """One port of an RDMA device as sysfs shows it. ``state``/``phys_state`` are the names
    (``ACTIVE``, ``LinkUp``), ``rate_gbps`` the number of ``400 Gb/sec (4X NDR)``;
    ``counters`` and ``hw_counters`` by file name."""

    device: str
    port: int
    state: str
    phys_state: str
    rate_gbps: float | None
    link_layer: str
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    fw_ver: str = ""
    hca_type: str = ""

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def up(self) -> bool:
        return self.state in ("ACTIVE", "ACTIVE_DEFER")


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _counters(directory: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if name in _NOT_COUNTERS:
            continue
        text = _text(directory / name)
        if text is None:
            continue
        try:
            out[name] = int(text)  # real sysfs ends in "\n"; strip() took it (or its absence)
        except ValueError:
            raise HealthParseError(f"{text!r} is not an integer counter",
                                   source=str(directory / name)) from None
    return out


def _state_name(text: str | None) -> str:
    """``4: ACTIVE`` → ``ACTIVE``; ``5: LinkUp`` → ``LinkUp``."""
    return "" if text is None else text.split(":", 1)[-1].strip()


def ib_port_dirs(root: Path) -> Iterator[tuple[str, str, Path]]:
    """Each port under ``root`` (a ``/sys/class/infiniband`` directory) as its device, its
    port number and its directory; devices in name order, ports in numeric order. An absent
    root, or a device without ports, gives none."""
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return
    for dev in devices:
        try:
            ports = sorted(os.listdir(root / dev / "ports"), key=lambda p: (len(p), p))
        except OSError:
            continue
        for num in ports:
            yield dev, num, root / dev / "ports" / num


def read_ib_sysfs(root: str | Path) -> list[IbPort]:
    """Every port under ``root`` (a ``/sys/class/infiniband`` directory), devices and ports in
    name order; an absent root gives none."""
    root = Path(root)
    out: list[IbPort] = []
    for dev, num, base in ib_port_dirs(root):
        rate = _text(base / "rate")
        m = re.match(r"([\d.]+) Gb/sec", rate or "")
        out.append(IbPort(dev, int(num), _state_name(_text(base / "state")),
                          _state_name(_text(base / "phys_state")),
                          float(m.group(1)) if m else None,
                          _text(base / "link_layer") or "", _counters(base / "counters"),
                          _counters(base / "hw_counters"), _text(root / dev / "fw_ver") or "",
                          _text(root / dev / "hca_type") or ""))
    return out


@dataclass
class PerfqueryBlock:
    """One ``perfquery`` block: its title (``Port extended counters``, ``PortRcvErrorDetails
    counters``), LID, port, and every ``Name:....value`` line (hex values as integers)."""

    title: str
    lid: int
    port: int
    counters: dict[str, int] = field(default_factory=dict)


_PQ_HEAD = re.compile(r"^# (.+?):\s*Lid (\d+) port (\d+)")
_PQ_LINE = re.compile(r"^(\w+):\.*(\S+)$")


def parse_perfquery(text: str, source: str = "perfquery") -> list[PerfqueryBlock]:
    out: list[PerfqueryBlock] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if m := _PQ_HEAD.match(line):
            out.append(PerfqueryBlock(m.group(1), int(m.group(2)), int(m.group(3))))
            continue
        m = _PQ_LINE.match(line)
        if m is None or not out:
            raise HealthParseError(f"expected '# ... Lid N port P' or 'Name:....value', got "
                                   f"{line!r}", source=source, line=no)
        try:
            out[-1].counters[m.group(1)] = int(m.group(2), 0)
        except ValueError:
            raise HealthParseError(f"{m.group(1)} value {m.group(2)!r} is not an integer",
                                   source=source, line=no) from None
    return out


@dataclass
class PmPort:
    """One port block of an ibdiagnet PM counters dump."""

    port: int
    lid: int
    guid: str
    port_name: str
    counters: dict[str, int] = field(default_factory=dict)


_PM_HEAD = re.compile(r"^Port=(\d+) Lid=(0x[0-9a-fA-F]+) GUID=(0x[0-9a-fA-F]+) .*?"
                      r"Port Name=(\S+)")


def parse_ibdiagnet_pm(text: str, source: str = "ibdiagnet PM") -> list[PmPort]:
    out: list[PmPort] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or set(line) == {"-"}:
            continue
        if m := _PM_HEAD.match(line):
            out.append(PmPort(int(m.group(1)), int(m.group(2), 16), m.group(3), m.group(4)))
            continue
        name, sep, value = line.partition("=")
        if not sep or not out:
            raise HealthParseError(f"expected 'Port=...' or 'counter=0x...', got {line!r}",
                                   source=source, line=no)
        try:
            out[-1].counters[name] = int(value, 0)
        except ValueError:
            raise HealthParseError(f"{name} value {value!r} is not an integer", source=source,
                                   line=no) from None
    return out


@dataclass
class UnhealthyPort:
    """One row of OpenSM's unhealthy-ports dump (each bad link is listed from both ends)."""

    guid: str
    port: int
    node: str
    peer_guid: str
    peer_port: int
    peer_node: str
    conditions: tuple[str, ...]
    time: str


_UNHEALTHY = re.compile(r'^(0x[0-9a-fA-F]+), (\d+), "([^"]*)", (0x[0-9a-fA-F]+), (\d+), '
                        r'"([^"]*)", \{([^}]*)\}, (.+)$')


def parse_opensm_unhealthy(text: str,
                           source: str = "opensm unhealthy ports") -> list[UnhealthyPort]:
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _UNHEALTHY.match(line)
        if m is None:
            raise HealthParseError("expected 'GUID, port, \"desc\", peer GUID, peer port, "
                                   "\"peer desc\", {COND,...}, time'", source=source, line=no)
        out.append(UnhealthyPort(m.group(1), int(m.group(2)), m.group(3), m.group(4),
                                 int(m.group(5)), m.group(6),
                                 tuple(c.strip() for c in m.group(7).split(",") if c.strip()),
                                 m.group(8)))
    return out
