"""Sidecar settings: command-line flags with ``C4_*`` environment fallbacks."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from collectors.sidecar.edge import EdgeConfig


def _default_spill_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "c4" / "spill"


@dataclass(frozen=True)
class SidecarConfig:
    daemon: str = "127.0.0.1:7444"
    socket_path: Path = Path("/tmp/c4/sidecar.sock")
    host: str = field(default_factory=socket.gethostname)
    spill_dir: Path = field(default_factory=_default_spill_dir)
    spill_max_bytes: int = 1 << 30
    # Records held in memory (sent or not, unacknowledged) before the oldest go to the spill.
    memory_max_bytes: int = 256 << 20
    # Disconnected this long: everything unacknowledged goes to disk, so a crash loses nothing.
    spill_after_s: float = 2.0
    batch_records: int = 16384
    flush_interval_s: float = 0.2
    max_inflight: int = 64
    link_interval_s: float = 1.0
    # also the collectors' heartbeat to the daemon: how soon a frozen rank is told from a
    # rank it blocks
    stats_interval_s: float = 1.0
    reconnect_max_s: float = 5.0
    # Reaching the daemon: TLS files and bearer token ("": the C4_TLS_* / C4_TOKEN variables).
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    token: str = ""
    # Prometheus ``/metrics``: "" (off), PORT (on loopback) or HOST:PORT.
    metrics_listen: str = ""
    # Reduction at the edge, ports and the detail ring (collectors.sidecar.edge).
    edge: EdgeConfig = field(default_factory=EdgeConfig)

    def __post_init__(self) -> None:
        if ":" not in self.daemon:
            raise ValueError(f"daemon address {self.daemon!r} needs HOST:PORT")
        for name in ("spill_max_bytes", "memory_max_bytes", "batch_records", "max_inflight"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("flush_interval_s", "link_interval_s", "stats_interval_s",
                     "reconnect_max_s", "spill_after_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
