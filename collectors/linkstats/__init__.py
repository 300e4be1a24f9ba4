"""Per-connection link counters for the sidecar: kernel TCP_INFO of the local ranks' sockets
(``tcp``) and RDMA port counters (``rdma``), as ``ConnSampleBatch`` columns.

    sampler = LinkSampler({0: pid0, 1: pid1})
    cols = sampler.sample()          # every second
    batch = c4.proto.codec.encode_conns(job, cols)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from c4.proto.codec import CONN_COLUMNS, Columns, concat, empty_columns
from collectors.linkstats import rdma
from collectors.linkstats.errors import LinkStatsError
from collectors.linkstats.tcp import SocketSample, TcpSampler, sample_tcp, to_columns

__all__ = [
    "LinkSampler",
    "LinkStatsError",
    "SocketSample",
    "concat_columns",
    "sample_tcp",
    "to_columns",
]

log = logging.getLogger(__name__)


def concat_columns(parts: Sequence[Columns]) -> Columns:
    """Stack conn batches into one, merging their string tables."""
    parts = [p for p in parts if len(p)]
    return concat(parts) if parts else empty_columns(CONN_COLUMNS)


class LinkSampler:
    """Samples the link counters of a node's local ranks; ``sample()`` is meant for every ~1 s.

    ``pids`` maps rank -> pid (from each rank's RankInfo); ``rdma_ports`` optionally maps
    rank -> ``"dev/port"`` (e.g. ``"mlx5_0/1"``) for ranks that talk over RDMA. A port shared by
    several ranks is reported once, under its lowest rank, so its bytes are not counted twice.
    """

    def __init__(
        self,
        pids: Mapping[int, int] | None = None,
        *,
        rdma_ports: Mapping[int, str] | None = None,
        proc_root: str = "/proc",
        sysfs_root: str = "/sys",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._tcp = TcpSampler(proc_root=proc_root, clock=clock)
        self._ports = rdma.PortSampler(sysfs_root=sysfs_root, clock=clock)
        self._rank_of_pid: dict[int, int] = {}
        self._rank_of_port: dict[str, int] = {}
        self.set_ranks(pids or {}, rdma_ports)

    def set_ranks(
        self, pids: Mapping[int, int], rdma_ports: Mapping[int, str] | None = None
    ) -> None:
        """Replace the set of local ranks (a rank joined, exited or restarted); cheap enough to
        call before every sample. ``rdma_ports`` None keeps the current ports."""
        rank_of_pid: dict[int, int] = {}
        for rank, pid in sorted(pids.items()):
            rank_of_pid.setdefault(pid, rank)
        self._rank_of_pid = rank_of_pid
        if rdma_ports is not None:
            rank_of_port: dict[str, int] = {}
            for rank, name in sorted(rdma_ports.items()):
                dev, port = rdma.parse_port(name)
                rank_of_port.setdefault(f"{dev}/{port}", rank)
            self._rank_of_port = rank_of_port

    def sample(self) -> Columns:
        """One row per established TCP socket of the ranks' processes, plus one per RDMA port.

        Raises:
            LinkStatsError: the kernel refused the sock_diag dump.
        """
        parts = []
        if self._rank_of_pid:
            samples = self._tcp.sample(self._rank_of_pid)
            parts.append(to_columns(samples, self._rank_of_pid))
        if self._rank_of_port:
            ports = [rdma.parse_port(name) for name in self._rank_of_port]
            port_samples, rates = self._ports.sample(ports)
            parts.append(rdma.to_columns(port_samples, self._rank_of_port, rates))
        return concat_columns(parts)

    def close(self) -> None:
        self._tcp.close()

    def __enter__(self) -> LinkSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
