"""The sidecar's reduction settings (``c4 sidecar`` flags): windows, the detail ring, ports."""

from __future__ import annotations

from dataclasses import dataclass

from collectors.health.watch import HealthWatchConfig

PORT_MODES = ("mapped", "all", "off")


@dataclass(frozen=True)
class EdgeConfig:
    """The sidecar's reduction settings (``c4 sidecar`` flags)."""

    #: progress and linkstat window while the daemon sets none (``--window``)
    window_s: float = 1.0
    #: the watermark's lag behind now: rows of calls entered earlier have all arrived
    #: (collectors flush every 0.1 s and ship a pending call open after 0.5 s)
    lag_s: float = 0.8
    #: bytes of full records kept for detail requests (``--detail-bytes``; 0: none)
    ring_bytes: int = 128 << 20
    #: NIC ports read from sysfs (``--ports``): "mapped" (the ports of ``nic_map`` and those
    #: discovery names: none without either), "all" (every port but lo, unmapped ones as
    #: ``<host>/<port>``), "off"
    ports: str = "mapped"
    sysfs_root: str = "/sys"
    #: port name -> topology NIC id (``--nic-map``); empty: ``<host>/<port>``
    nic_map: tuple[tuple[str, str], ...] = ()
    #: a port record at least this often while nothing changes (``--port-heartbeat``)
    port_heartbeat_s: float = 30.0
    #: most records one detail answer carries
    detail_max_records: int = 1_000_000
    #: node health sampling (``--health``: GPUs, kernel events, IB ports, PSI); None: off
    health: HealthWatchConfig | None = None

    def __post_init__(self) -> None:
        for name in ("window_s", "port_heartbeat_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.lag_s < 0 or self.ring_bytes < 0:
            raise ValueError("lag_s and ring_bytes must not be negative")
        if self.ports not in PORT_MODES:
            raise ValueError(f"ports must be one of {', '.join(PORT_MODES)}, got {self.ports!r}")

    @property
    def window_ns(self) -> int:
        return int(self.window_s * 1e9)
