"""``ibdev2netdev`` (MLNX_OFED / mlnx-tools): which network interface each RDMA device port
is, and whether its link is up. Reads the default form (``mlx5_0 port 1 ==> ibp24s0 (Up)``),
``-v`` (a PCI address first, the port state in parentheses) and the old ``<===>`` form."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from c4.topology.importers.common import TopologyImportError, read_text

_LINE = re.compile(r"port\s+(\d+)\s+(?:\((\w+)\s*\)\s+)?(?:==>|<===>)\s+(\S+)"
                   r"(?:\s+\((\w+)\))?\s*$")
_BDF = re.compile(r"^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


@dataclass(frozen=True)
class DevicePort:
    ibdev: str
    port: int
    netdev: str
    state: str | None = None     # "up", "down", None (NA or not printed)
    pci: str | None = None       # with -v


def read_ports(path: str | Path) -> list[DevicePort]:
    return parse(read_text(path), str(path))


def parse(text: str, source: str) -> list[DevicePort]:
    out: list[DevicePort] = []
    for no, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        m = _LINE.search(line)
        tokens = line.split()
        if not m or len(tokens) < 4:
            raise TopologyImportError(
                f"not an ibdev2netdev line: {line[:80]!r}; expected '<ibdev> port <n> ==> "
                "<netdev> (Up|Down)'", source=source, line=no)
        pci = tokens[0] if _BDF.match(tokens[0]) else None
        ibdev = tokens[1] if pci else tokens[0]
        state = (m.group(4) or "").lower()
        out.append(DevicePort(ibdev, int(m.group(1)), m.group(3),
                              state if state in ("up", "down") else None, pci))
    if not out:
        raise TopologyImportError("no ibdev2netdev lines (the host has no RDMA device, or the "
                                  "file is empty)", source=source)
    return out
