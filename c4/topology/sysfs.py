"""What ``/sys/class/infiniband`` says about a host's RDMA devices: GUIDs, node description,
and per port the rate, state, link layer and network interface (kernel ABI
``sysfs-class-infiniband``; FORMATS.md section 7a of the health fixtures)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


@dataclass
class SysfsPort:
    port: int
    gbps: float | None = None
    state: str | None = None          # "up" (ACTIVE) or "down"
    link_layer: str | None = None     # InfiniBand, Ethernet
    netdev: str | None = None
    port_guid: str | None = None      # from the port's GID 0


@dataclass
class SysfsDevice:
    ibdev: str
    guid: str | None = None           # node GUID, 16 hex digits
    desc: str | None = None
    hca_type: str | None = None
    ports: dict[int, SysfsPort] = field(default_factory=dict)


def read_devices(sysfs_root: str | Path) -> dict[str, SysfsDevice]:
    """The RDMA devices under ``<sysfs_root>/class/infiniband``; none when it is missing.
    Unreadable files are skipped (a device half-removed while reading)."""
    base = Path(sysfs_root) / "class" / "infiniband"
    out: dict[str, SysfsDevice] = {}
    if not base.is_dir():
        return out
    for dev_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        dev = SysfsDevice(dev_dir.name, guid=_guid(_read(dev_dir / "node_guid")),
                          desc=_read(dev_dir / "node_desc"),
                          hca_type=_read(dev_dir / "hca_type"))
        netdevs = _listdir(dev_dir / "device" / "net")
        ports_dir = dev_dir / "ports"
        for p_dir in sorted(_listdir_paths(ports_dir)):
            if not p_dir.name.isdigit():
                continue
            port = SysfsPort(int(p_dir.name))
            rate = _RATE.match(_read(p_dir / "rate") or "")
            port.gbps = float(rate.group(1)) if rate else None
            state = _read(p_dir / "state")
            if state:
                port.state = "up" if "ACTIVE" in state.upper() else "down"
            port.link_layer = _read(p_dir / "link_layer")
            port.netdev = _read(p_dir / "gid_attrs" / "ndevs" / "0") or (
                netdevs[0] if len(netdevs) == 1 else None)
            gid = _read(p_dir / "gids" / "0")
            if gid and gid.replace(":", "").strip("0"):
                port.port_guid = _guid(":".join(gid.split(":")[4:]))
            dev.ports[port.port] = port
        out[dev.ibdev] = dev
    return out


def _guid(text: str | None) -> str | None:
    if not text:
        return None
    digits = text.replace(":", "").lower()
    return digits.zfill(16) if re.fullmatch(r"[0-9a-f]{1,16}", digits) else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _listdir(path: Path) -> list[str]:
    return sorted(p.name for p in _listdir_paths(path))


def _listdir_paths(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []
