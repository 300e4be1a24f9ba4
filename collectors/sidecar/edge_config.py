"""The sidecar's reduction settings (``c4 sidecar`` flags): windows, the detail ring, ports."""

from __future__ import annotations

from dataclasses import dataclass

from c4.settings import non_negative, positive, setting, validate
from collectors.health.settings import HealthWatchConfig, format_map
from collectors.sidecar.errors import SidecarConfigError

PORT_MODES = ("mapped", "all", "off")


@dataclass(frozen=True)
class EdgeConfig:
    """The sidecar's reduction settings (``c4 sidecar`` flags)."""

    #: progress and linkstat window while the daemon sets none
    window_s: float = setting(1.0, flag="--window", env="C4_WINDOW", check=positive,
                              help="Seconds per progress/linkstat window while the daemon "
                                   "reduces a job's telemetry (it may lengthen them).")
    #: the watermark's lag behind now: rows of calls entered earlier have all arrived
    #: (collectors flush every 0.1 s and ship a pending call open after 0.5 s)
    lag_s: float = setting(0.8, check=non_negative)
    #: bytes of full records kept for detail requests (0: none)
    ring_bytes: int = setting(128 << 20, flag="--detail-bytes", env="C4_DETAIL_BYTES",
                              check=non_negative,
                              help="Memory for the full records of the last minutes, pulled "
                                   "by the daemon around a fault (0: keep none).")
    #: NIC ports read from sysfs: "mapped" (the ports of ``nic_map`` and those discovery
    #: names: none without either), "all" (every port but lo, unmapped ones as
    #: ``<host>/<port>``), "off"
    ports: str = setting("mapped", flag="--ports", env="C4_PORTS",
                         check=lambda v: None if v in PORT_MODES else
                         f"must be one of {', '.join(PORT_MODES)}",
                         help="NIC port states and error counters from sysfs: mapped (the "
                              "ports of --nic-map and of the NICs discovery found), all (every "
                              "port but lo; unmapped ones as HOST/PORT) or off.")
    sysfs_root: str = setting("/sys", flag="--sysfs-root", env="C4_SYSFS_ROOT",
                              help="Where sysfs is mounted (for containers and tests).")
    #: port name -> topology NIC id; empty: ``<host>/<port>``
    nic_map: tuple[tuple[str, str], ...] = setting(
        (), flag="--nic-map", env="C4_NIC_MAP", cli_type=str, parse=lambda text: _nic_map(text),
        to_cli=format_map,
        help="Ports to topology NIC ids, PORT=NIC,...: eth0=node3/nic0, mlx5_0/1=node3/nic1 "
             "(InfiniBand: DEVICE/PORT): the ids the ranks announce (C4_NIC) and the topology "
             "uses.")
    #: a port record at least this often while nothing changes
    port_heartbeat_s: float = setting(30.0, flag="--port-heartbeat", env="C4_PORT_HEARTBEAT",
                                      check=positive,
                                      help="Seconds between port records while nothing "
                                           "changes.")
    #: most records one detail answer carries
    detail_max_records: int = 1_000_000
    #: node health sampling (GPUs, kernel events, IB ports, PSI); None: off
    health: HealthWatchConfig | None = setting(
        None, flag="--health/--no-health", env="C4_HEALTH", part=HealthWatchConfig,
        to_cli=lambda health: health is not None,
        help="Sample node health (GPU state, kernel XID/AER/link events, IB port counters, "
             "PSI, CPU steal) and ship it as health records.")

    def __post_init__(self) -> None:
        validate(self, SidecarConfigError)

    @property
    def window_ns(self) -> int:
        return int(self.window_s * 1e9)


def _nic_map(text: str) -> tuple[tuple[str, str], ...]:
    # the port reader (numpy, the wire formats) only once a map is given
    from collectors.sidecar.ports import parse_nic_map

    return tuple(parse_nic_map(text).items())
