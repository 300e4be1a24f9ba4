"""NIC port states and counters from sysfs, as ``port`` records (trace format version 2).

Read every window: ``/sys/class/net/<if>/operstate`` and ``statistics/``, and
``/sys/class/infiniband/<dev>/ports/<n>/state``, ``counters/`` and ``hw_counters/``. A port is
named ``<if>`` (netdev) or ``<dev>/<n>`` (InfiniBand port) and mapped to the topology NIC id the
daemon knows: through the sidecar's ``--nic-map`` (``eth0=node3/nic0,mlx5_0/1=node3/nic1``),
the ids the ranks announce (``C4_NIC``) and the topology uses; with ``--ports all`` the
unmapped ones as ``<host>/<port name>``. With a map, only the mapped ports are read. The ports
of a NIC cabled to several switches map to its one id (``mlx5_0/1=node3/nic1,mlx5_0/2=node3/nic1``)
and make one record: ``up`` while any of them is, counters summed (its InfiniBand ports only,
where it has them: an interface is one of them seen again).

A record goes out when a port's state or one of its error counters changed, and every
``heartbeat_s`` otherwise (with the byte counters), so the daemon knows the port is still
watched and clean without a record per port per second.

Counters, cumulative as the kernel reports them (-1: not read on this port):

=============  =====================================  =======================================
record         InfiniBand port                        netdev ``statistics/``
=============  =====================================  =======================================
link_downed    ``counters/link_downed``               ``../carrier_down_count``
symbol_errors  ``counters/symbol_error``              ``rx_crc_errors``
rcv_errors     ``counters/port_rcv_errors``           ``rx_errors``
xmit_discards  ``counters/port_xmit_discards``        ``tx_dropped``
retrans        ``hw_counters/local_ack_timeout_err``  (none: TCP retransmissions are per socket)
               + ``packet_seq_err`` + ``roce_adp_retrans``
rx_bytes       ``counters/port_rcv_data`` x 4         ``rx_bytes``
tx_bytes       ``counters/port_xmit_data`` x 4        ``tx_bytes``
=============  =====================================  =======================================

The port state is ``up`` for an InfiniBand port ``ACTIVE`` (or ``ACTIVE_DEFER``) and a netdev
``up`` (or ``unknown`` with carrier, as virtual links report), ``down`` otherwise.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from c4.proto.codec import PORT_COLUMNS, PORT_COUNTER_COLUMNS, Columns, empty_columns
from collectors.health.infiniband import ib_port_dirs

log = logging.getLogger(__name__)

ERROR_COUNTERS = ("link_downed", "symbol_errors", "rcv_errors", "xmit_discards", "retrans")

_IB_COUNTERS = {
    "link_downed": ("counters/link_downed",),
    "symbol_errors": ("counters/symbol_error",),
    "rcv_errors": ("counters/port_rcv_errors",),
    "xmit_discards": ("counters/port_xmit_discards",),
    "retrans": ("hw_counters/local_ack_timeout_err", "hw_counters/packet_seq_err",
                "hw_counters/roce_adp_retrans"),
}
_IB_DATA = {"rx_bytes": "counters/port_rcv_data", "tx_bytes": "counters/port_xmit_data"}
_NET_COUNTERS = {
    "link_downed": "carrier_down_count",
    "symbol_errors": "statistics/rx_crc_errors",
    "rcv_errors": "statistics/rx_errors",
    "xmit_discards": "statistics/tx_dropped",
    "rx_bytes": "statistics/rx_bytes",
    "tx_bytes": "statistics/tx_bytes",
}


class PortMapError(ValueError):
    """A ``--nic-map`` that cannot be read."""


@dataclass(frozen=True)
class PortReading:
    """One port at one instant."""

    port: str                    # "eth0" or "mlx5_0/1"
    up: bool
    counters: dict[str, int] = field(default_factory=dict)   # PORT_COUNTER_COLUMNS, as read


def parse_nic_map(text: str) -> dict[str, str]:
    """``PORT=NIC[,PORT=NIC...]`` -> {port: nic}; raises PortMapError naming the bad entry."""
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        port, sep, nic = item.partition("=")
        if not sep or not port.strip() or not nic.strip():
            raise PortMapError(f"--nic-map entry {item!r} is not PORT=NIC (e.g. "
                               "eth0=node3/nic0 or mlx5_0/1=node3/nic1)")
        out[port.strip()] = nic.strip()
    return out


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or "x")
    except (OSError, ValueError):
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def ib_state_up(text: str) -> bool:
    """``4: ACTIVE`` (and ``5: ACTIVE_DEFER``) pass traffic; DOWN, INIT, ARMED do not."""
    name = text.split(":", 1)[-1].strip().upper()
    return name in ("ACTIVE", "ACTIVE_DEFER")


def read_infiniband(root: Path) -> list[PortReading]:
    """Every port under ``root`` (a ``/sys/class/infiniband`` directory)."""
    out: list[PortReading] = []
    for dev, num, base in ib_port_dirs(root):
        state = _read_text(base / "state")
        if state is None:
            continue
        counters: dict[str, int] = {}
        for name, files in _IB_COUNTERS.items():
            values = [v for v in (_read_int(base / f) for f in files) if v is not None]
            if values:
                counters[name] = sum(values)
        for name, rel in _IB_DATA.items():
            v = _read_int(base / rel)
            if v is not None:
                counters[name] = 4 * v  # the kernel counts octets divided by 4
        out.append(PortReading(f"{dev}/{num}", ib_state_up(state), counters))
    return out


def read_net(root: Path, *, skip_loopback: bool = True) -> list[PortReading]:
    """Every interface under ``root`` (a ``/sys/class/net`` directory) but ``lo``."""
    out: list[PortReading] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for name in names:
        if skip_loopback and name == "lo":
            continue
        base = root / name
        state = _read_text(base / "operstate")
        if state is None:
            continue
        up = state == "up" or (state == "unknown" and _read_int(base / "carrier") == 1)
        counters = {k: v for k, rel in _NET_COUNTERS.items()
                    if (v := _read_int(base / rel)) is not None}
        out.append(PortReading(name, up, counters))
    return out


def _one_nic(ports: list[PortReading]) -> PortReading:
    """The ports mapped to one NIC (a NIC cabled to two switches) as one reading: up while
    any port is, each counter summed over the ports that have it; so a port lost while the
    other carries on shows as ``link_downed`` climbing on a NIC still up."""
    if len(ports) == 1:
        return ports[0]
    counters: dict[str, int] = {}
    for r in ports:
        for k, v in r.counters.items():
            counters[k] = counters.get(k, 0) + v
    return PortReading("+".join(r.port for r in ports), any(r.up for r in ports), counters)


class PortWatch:
    """Reads the node's ports and says which changed; one per sidecar (``poll`` from one
    thread)."""

    def __init__(self, host: str, *, sysfs_root: str | Path = "/sys",
                 nic_map: Mapping[str, str] | None = None, all_ports: bool = False,
                 heartbeat_s: float = 30.0, clock: Callable[[], int] = time.time_ns) -> None:
        if heartbeat_s <= 0:
            raise ValueError(f"the port heartbeat must be positive, got {heartbeat_s}")
        self.host = host
        self.root = Path(sysfs_root)
        self.nic_map = dict(nic_map or {})
        self.all_ports = all_ports
        self.heartbeat_ns = int(heartbeat_s * 1e9)
        self._clock = clock
        self._last: dict[str, PortReading] = {}     # nic id -> last reading sent
        self._sent_ns: dict[str, int] = {}
        self._latest: dict[str, tuple[int, PortReading]] = {}

    def nic_id(self, port: str) -> str | None:
        """The topology id of a port: mapped, else (all ports) ``<host>/<port>``, else None."""
        nic = self.nic_map.get(port)
        if nic is None and self.all_ports:
            nic = f"{self.host}/{port}"
        return nic

    def read(self) -> dict[str, PortReading]:
        """The node's ports now, by NIC id."""
        found = read_infiniband(self.root / "class" / "infiniband") + \
            read_net(self.root / "class" / "net")
        ports: dict[str, list[PortReading]] = {}
        for r in found:
            nic = self.nic_id(r.port)
            if nic is not None:
                ports.setdefault(nic, []).append(r)
        # (an InfiniBand port and its interface are one port seen twice: where a NIC has
        # InfiniBand ports, its interfaces are left out, so nothing is counted twice)
        return {nic: _one_nic([r for r in rs if "/" in r.port] or rs)
                for nic, rs in ports.items()}

    def poll(self) -> Columns:
        """Rows for the ports whose state or error counters changed since their last row, or
        whose last row is older than the heartbeat."""
        now = self._clock()
        readings = self.read()
        for nic, r in readings.items():
            self._latest[nic] = (now, r)
        rows = []
        for nic, r in readings.items():
            last = self._last.get(nic)
            changed = last is None or last.up != r.up or any(
                last.counters.get(k) != r.counters.get(k) for k in ERROR_COUNTERS)
            if changed or now - self._sent_ns.get(nic, 0) >= self.heartbeat_ns:
                self._last[nic] = r
                self._sent_ns[nic] = now
                rows.append((nic, now, r))
        return self._columns(rows)

    def current(self) -> Columns:
        """The latest reading of every port (for a job that just started on this node)."""
        return self._columns([(nic, t, r) for nic, (t, r) in sorted(self._latest.items())])

    def _columns(self, rows: list[tuple[str, int, PortReading]]) -> Columns:
        if not rows:
            return empty_columns(PORT_COLUMNS)
        strings = [self.host] + [nic for nic, _, _ in rows]
        c: dict[str, np.ndarray] = {
            "host": np.zeros(len(rows), np.uint32),
            "nic": np.arange(1, len(rows) + 1, dtype=np.uint32),
            "t_ns": np.asarray([t for _, t, _ in rows], np.int64),
            "up": np.asarray([r.up for _, _, r in rows], np.uint8),
        }
        for name in PORT_COUNTER_COLUMNS:
            c[name] = np.asarray([r.counters.get(name, -1) for _, _, r in rows], np.int64)
        return Columns({k: c[k] for k in PORT_COLUMNS}, strings)
