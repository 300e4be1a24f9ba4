"""RDMA (InfiniBand / RoCE) port counters from sysfs.

Reads ``<sysfs>/class/infiniband/<dev>/ports/<n>/counters/*`` (the IB PMA port counters:
``port_xmit_data``/``port_rcv_data`` count 4-byte words, ``port_xmit_wait``, ``symbol_error``,
``link_downed``, ...) and ``.../hw_counters/*`` where the driver provides them (mlx5:
``local_ack_timeout_err``, ``packet_seq_err``, ``out_of_sequence``, ``np_cnp_sent``, ...).
Every file holds one decimal integer and a newline; a counter that cannot be read (the read
fails, or the file holds something other than an integer) is left out rather than reported as 0.

UNTESTED ON REAL HARDWARE: the machine this was written on has no RDMA device. The tests run
on a directory tree that copies the real sysfs file names and value formats.

RDMA traffic is not visible per connection from the host, so a port is reported as one
conn row per sample: ``local`` is ``"rdma:<dev>/<port>"``, ``remote`` is ``""`` (unknown peer),
``bytes_acked``/``bytes_received`` are the port's transmitted/received bytes, ``delivery_rate``
the transmit rate since the previous sample, ``retrans`` the transport retries the driver counts,
``rtt_us`` 0.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from c4.proto.codec import CONN_COLUMNS, Columns, empty_columns

log = logging.getLogger(__name__)

WORD_BYTES = 4  # port_xmit_data / port_rcv_data count 32-bit words
# hw_counters that count a retransmission by the requester (mlx5 names).
RETRANS_COUNTERS = ("local_ack_timeout_err", "packet_seq_err", "implied_nak_seq_err",
                    "roce_adp_retrans")


@dataclass(frozen=True)
class PortSample:
    """All readable counters of one RDMA port at one instant (cumulative values)."""

    device: str
    port: int
    t_ns: int
    state: str  # "ACTIVE", "DOWN", ... ("" when unreadable)
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)
    counters: dict[str, int] = field(default_factory=dict)  # counters/ then hw_counters/

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def xmit_bytes(self) -> int:
        return self.counters.get("port_xmit_data", 0) * WORD_BYTES

    @property
    def rcv_bytes(self) -> int:
        return self.counters.get("port_rcv_data", 0) * WORD_BYTES

    @property
    def retrans(self) -> int:
        return sum(self.counters.get(name, 0) for name in RETRANS_COUNTERS)


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_counters(directory: str, out: dict[str, int]) -> None:
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        text = _read_text(os.path.join(directory, name))
        if text is None:
            continue
        try:
            out[name] = int(text)
        except ValueError:
            log.debug("RDMA counter %s/%s is unreadable: %r", directory, name, text)


def list_ports(sysfs_root: str = "/sys") -> list[tuple[str, int]]:
    """Every (device, port) under ``<sysfs_root>/class/infiniband``; [] without RDMA."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return []
    out: list[tuple[str, int]] = []
    for dev in devices:
        try:
            ports = os.listdir(os.path.join(base, dev, "ports"))
        except OSError:
            continue
        out.extend((dev, int(p)) for p in sorted(ports, key=lambda s: (len(s), s)) if p.isdigit())
    return out


def sample_ports(
    ports: Iterable[tuple[str, int]] | None = None,
    *,
    sysfs_root: str = "/sys",
    clock: Callable[[], int] = time.time_ns,
) -> list[PortSample]:
    """Read the counters of ``ports`` (default: all); a port that vanished is skipped."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    out: list[PortSample] = []
    for dev, port in list_ports(sysfs_root) if ports is None else ports:
        pdir = os.path.join(base, dev, "ports", str(port))
        if not os.path.isdir(pdir):
            continue
        counters: dict[str, int] = {}
        _read_counters(os.path.join(pdir, "counters"), counters)
        _read_counters(os.path.join(pdir, "hw_counters"), counters)
        state = _read_text(os.path.join(pdir, "state")) or ""  # "4: ACTIVE"
        out.append(PortSample(
            dev, port, clock(), state.partition(": ")[2] or state,
            _read_text(os.path.join(pdir, "link_layer")) or "", counters,
        ))
    return out


def parse_port(name: str) -> tuple[str, int]:
    """``"mlx5_0/1"`` -> ``("mlx5_0", 1)``; a bare device means port 1."""
    dev, _, port = name.partition("/")
    if not dev or (port and not port.isdigit()):
        raise ValueError(f"RDMA port {name!r} is not DEVICE or DEVICE/PORT, e.g. mlx5_0/1")
    return dev, int(port or 1)


class PortSampler:
    """Samples chosen ports repeatedly and derives each port's transmit rate between samples."""

    def __init__(self, *, sysfs_root: str = "/sys", clock: Callable[[], int] = time.time_ns):
        self.sysfs_root = sysfs_root
        self._clock = clock
        self._last: dict[tuple[str, int], tuple[int, int]] = {}  # port -> (t_ns, xmit bytes)

    def sample(self, ports: Iterable[tuple[str, int]]) -> tuple[list[PortSample], list[int]]:
        """The samples and, for each, bytes/s transmitted since the previous sample (0 first)."""
        samples = sample_ports(ports, sysfs_root=self.sysfs_root, clock=self._clock)
        rates: list[int] = []
        for s in samples:
            key = (s.device, s.port)
            prev = self._last.get(key)
            rate = 0
            if prev is not None and s.t_ns > prev[0] and s.xmit_bytes >= prev[1]:
                rate = (s.xmit_bytes - prev[1]) * 1_000_000_000 // (s.t_ns - prev[0])
            self._last[key] = (s.t_ns, s.xmit_bytes)
            rates.append(rate)
        return samples, rates


def to_columns(
    samples: Sequence[PortSample], rank_of_port: Mapping[str, int], rates: Sequence[int] = ()
) -> Columns:
    """CONN_COLUMNS rows for the sampled ports that a rank uses (``"dev/port"`` -> rank)."""
    rows = [(i, s) for i, s in enumerate(samples) if s.name in rank_of_port]
    if not rows:
        return empty_columns(CONN_COLUMNS)
    strings = [""] + [f"rdma:{s.name}" for _, s in rows]
    n = len(rows)
    values = {
        "rank": [rank_of_port[s.name] for _, s in rows],
        "local": range(1, n + 1),
        "remote": [0] * n,
        "t_ns": [s.t_ns for _, s in rows],
        "bytes_acked": [s.xmit_bytes for _, s in rows],
        "bytes_received": [s.rcv_bytes for _, s in rows],
        "rtt_us": [0] * n,
        "delivery_rate": [rates[i] if i < len(rates) else 0 for i, _ in rows],
        "retrans": [s.retrans for _, s in rows],
        "busy_us": [0] * n,  # ports have no busy time; rates come from delivery_rate
    }
    return Columns(
        {name: np.asarray(list(values[name]), dtype=dt) for name, dt in CONN_COLUMNS.items()},
        strings,
    )
