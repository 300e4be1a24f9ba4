"""Sidecar settings: command-line flags with ``C4_*`` environment fallbacks."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from collectors.sidecar.edge_config import EdgeConfig
from collectors.sidecar.errors import SidecarConfigError


def _default_spill_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "c4" / "spill"


@dataclass(frozen=True)
class SidecarConfig:
    daemon: str = "127.0.0.1:7444"
    socket_path: Path = Path("/tmp/c4/sidecar.sock")
    # The socket's permission bits and group ("": the sidecar's own); its owner is the
    # sidecar's user. Never world-writable unless the operator says so.
    socket_mode: int = 0o660
    socket_group: str = ""
    host: str = field(default_factory=socket.gethostname)
    # The write-ahead log ("spill"): where, how much disk it may use, and how long a record may
    # stay undelivered before it is fsynced (what the daemon stored quickly never is).
    spill_dir: Path = field(default_factory=_default_spill_dir)
    spill_max_bytes: int = 1 << 30
    wal_sync_interval_s: float = 1.0
    # False: keep nothing on disk (only to measure what the log costs; a crash loses records).
    wal: bool = True
    # Requests kept in memory (sent or not, unacknowledged); the rest is read back from the log.
    memory_max_bytes: int = 256 << 20
    batch_records: int = 16384
    flush_interval_s: float = 0.2
    max_inflight: int = 64
    # Largest request sent to the daemon (its gRPC limit is 64 MiB); larger ones are dropped.
    max_request_bytes: int = 32 << 20
    link_interval_s: float = 1.0
    # also the collectors' heartbeat to the daemon: how soon a frozen rank is told from a
    # rank it blocks
    stats_interval_s: float = 1.0
    reconnect_max_s: float = 5.0
    # Local connections: largest frame, time to finish one, unfinished bytes over all
    # connections, connections, and collectors whose statistics are forwarded.
    max_frame_bytes: int = 16 << 20
    frame_timeout_s: float = 10.0
    max_buffered_bytes: int = 64 << 20
    max_connections: int = 4096
    max_collectors: int = 4096
    # Reaching the daemon: TLS files and bearer token ("": the C4_TLS_* / C4_TOKEN variables).
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    token: str = ""
    # Prometheus ``/metrics``: "" (off), PORT (on loopback) or HOST:PORT.
    metrics_listen: str = ""
    # Reduction at the edge, ports and the detail ring (collectors.sidecar.edge).
    edge: EdgeConfig = field(default_factory=EdgeConfig)
    # Discovery of the host's internals (collectors.sidecar.discovery): "on" (the host's
    # tools), "off", or a directory of recorded tool outputs; how often it runs again, and how
    # long each tool may take.
    discover: str = "on"
    discover_interval_s: float = 300.0
    discover_timeout_s: float = 20.0

    def __post_init__(self) -> None:
        if ":" not in self.daemon:
            raise SidecarConfigError(f"daemon address {self.daemon!r} needs HOST:PORT")
        for name in ("spill_max_bytes", "memory_max_bytes", "batch_records", "max_inflight",
                     "max_request_bytes", "max_frame_bytes", "max_buffered_bytes",
                     "max_connections", "max_collectors"):
            if getattr(self, name) < 1:
                raise SidecarConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("flush_interval_s", "link_interval_s", "stats_interval_s",
                     "reconnect_max_s", "frame_timeout_s", "discover_interval_s",
                     "discover_timeout_s"):
            if getattr(self, name) <= 0:
                raise SidecarConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.wal_sync_interval_s < 0:
            raise SidecarConfigError("wal_sync_interval_s must be >= 0 (0: fsync at once), "
                                     f"got {self.wal_sync_interval_s}")
        if self.socket_mode & ~0o777:
            raise SidecarConfigError(f"socket_mode {self.socket_mode:o} has bits beyond 0777")
        if self.max_frame_bytes > self.max_request_bytes:
            raise SidecarConfigError(
                f"max_frame_bytes ({self.max_frame_bytes}) must not exceed max_request_bytes "
                f"({self.max_request_bytes}): one frame may travel as one request")
