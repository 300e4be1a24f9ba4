"""Sidecar settings, declared once: each field carries its ``c4 sidecar`` flag, its ``C4_*``
environment variable, its help and its range (``c4.settings``); ``c4 sidecar``'s options are
derived from them."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from c4.settings import at_least, non_negative, positive, setting, validate
from collectors.sidecar.edge_config import EdgeConfig
from collectors.sidecar.errors import SidecarConfigError
from collectors.sidecar.nccl_source import NcclSourceConfig
from collectors.wire import default_socket_path


def _mode(text: str) -> int:
    # the socket server only once a mode is parsed: deriving the options imports no sidecar
    from collectors.sidecar.local import parse_mode

    return parse_mode(text)


def _default_spill_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "c4" / "spill"


@dataclass(frozen=True)
class SidecarConfig:
    daemon: str = setting("127.0.0.1:7444", flag="--daemon", env="C4_DAEMON",
                          help="The diagnosis daemon, HOST:PORT.")
    socket_path: Path = setting(default_factory=default_socket_path, flag="--socket",
                                env="C4_SIDECAR_SOCKET",
                                help="Unix socket the node's ranks write to (default "
                                     "$XDG_RUNTIME_DIR/c4/sidecar.sock or /tmp).")
    # The socket's permission bits and group ("": the sidecar's own); its owner is the
    # sidecar's user. Never world-writable unless the operator says so.
    socket_mode: int = setting(0o660, flag="--socket-mode", env="C4_SIDECAR_SOCKET_MODE",
                               cli_type=str, parse=lambda text: _mode(text),
                               to_cli=lambda m: f"{m:04o}",
                               check=lambda m: None if not m & ~0o777 else
                               "has bits beyond 0777",
                               help="Permission bits of the socket (octal). Its owner is the "
                                    "sidecar's user; 0666 lets every local user connect (each "
                                    "job stays its first user's).")
    socket_group: str = setting("", flag="--socket-group", env="C4_SIDECAR_SOCKET_GROUP",
                                help="Group of the socket, name or number (default: the "
                                     "sidecar's); with mode 0660 only its members (and the "
                                     "sidecar's user) can connect.")
    host: str = setting(default_factory=socket.gethostname, flag="--host", env="C4_HOST",
                        help="This node's id in the topology (default: hostname).")
    # The write-ahead log ("spill"): where, how much disk it may use, and how long a record may
    # stay undelivered before it is fsynced (what the daemon stored quickly never is).
    spill_dir: Path = setting(default_factory=_default_spill_dir, flag="--spill-dir",
                              env="C4_SPILL_DIR",
                              help="The write-ahead log: every record taken, kept until the "
                                   "daemon acknowledges it (default ~/.local/state/c4/spill).")
    spill_max_bytes: int = setting(1 << 30, flag="--spill-max-bytes", env="C4_SPILL_MAX_BYTES",
                                   check=at_least(1),
                                   help="Disk the log may use; beyond it (or when the disk is "
                                        "full) records are dropped and counted.")
    wal_sync_interval_s: float = setting(
        1.0, flag="--wal-sync-ms", env="C4_WAL_SYNC_MS", cli_type=float,
        parse=lambda ms: ms / 1000.0, to_cli=lambda s: s * 1000.0, check=non_negative,
        help="fsync what is still undelivered this long after it was logged (all of it in one "
             "batch); bounds what a node crash may lose. 0: at once.")
    # False: keep nothing on disk (only to measure what the log costs; a crash loses records).
    wal: bool = setting(True, flag="--no-wal", env="C4_NO_WAL", hidden=True, cli_type=bool,
                        parse=lambda no_wal: not no_wal, to_cli=lambda wal: not wal,
                        help="Keep nothing on disk (only to measure the log's cost: a crash "
                             "loses records).")
    # Requests kept in memory (sent or not, unacknowledged); the rest is read back from the log.
    memory_max_bytes: int = setting(256 << 20, check=at_least(1))
    batch_records: int = setting(16384, flag="--batch-records", env="C4_BATCH_RECORDS",
                                 check=at_least(1),
                                 help="Records per batch sent to the daemon.")
    flush_interval_s: float = setting(0.2, check=positive)
    max_inflight: int = setting(64, check=at_least(1))
    # Largest request sent to the daemon (its gRPC limit is 64 MiB); larger ones are dropped.
    max_request_bytes: int = setting(32 << 20, flag="--max-request-bytes",
                                     env="C4_SIDECAR_MAX_REQUEST_BYTES", check=at_least(1),
                                     help="Largest request sent to the daemon (keep it under "
                                          "the daemon's 64 MiB message limit); a larger one is "
                                          "dropped and counted.")
    link_interval_s: float = setting(1.0, flag="--link-interval", env="C4_LINK_INTERVAL",
                                     check=positive,
                                     help="Seconds between samples of connection counters.")
    # also the collectors' heartbeat to the daemon: how soon a frozen rank is told from a
    # rank it blocks
    stats_interval_s: float = setting(1.0, check=positive)
    reconnect_max_s: float = setting(5.0, check=positive)
    # Local connections: largest frame, time to finish one, unfinished bytes over all
    # connections, connections, and collectors whose statistics are forwarded.
    max_frame_bytes: int = setting(16 << 20, flag="--max-frame-bytes",
                                   env="C4_SIDECAR_MAX_FRAME_BYTES", check=at_least(1),
                                   help="Largest frame a local connection may send; a larger "
                                        "one closes it.")
    frame_timeout_s: float = setting(10.0, flag="--frame-timeout",
                                     env="C4_SIDECAR_FRAME_TIMEOUT", check=positive,
                                     help="Seconds a local connection may take to finish a "
                                          "frame before it is closed.")
    max_buffered_bytes: int = setting(64 << 20, check=at_least(1))
    max_connections: int = setting(4096, check=at_least(1))
    max_collectors: int = setting(4096, flag="--max-collectors",
                                  env="C4_SIDECAR_MAX_COLLECTORS", check=at_least(1),
                                  help="Ranks whose statistics the sidecar forwards.")
    # Reaching the daemon: TLS files and bearer token ("": the C4_TLS_* / C4_TOKEN variables).
    tls_ca: str = setting("", flag="--tls-ca", env="C4_TLS_CA",
                          help="Reach the daemon over TLS, trusting this CA (PEM).")
    tls_cert: str = setting("", flag="--tls-cert", env="C4_TLS_CERT",
                            help="Client certificate (PEM) for a mutual-TLS daemon.")
    tls_key: str = setting("", flag="--tls-key", env="C4_TLS_KEY",
                           help="Private key of --tls-cert.")
    # from the environment (or --token-file): on the command line every local user could
    # read it
    token: str = setting("", flag="--token", env="C4_TOKEN", hidden=True)
    # Prometheus ``/metrics``: "" (off), PORT (on loopback) or HOST:PORT.
    metrics_listen: str = setting("", flag="--metrics", env="C4_SIDECAR_METRICS",
                                  help="Serve Prometheus /metrics on PORT (loopback) or "
                                       "HOST:PORT; off by default.")
    # Reduction at the edge, ports, the detail ring and health (collectors.sidecar.edge).
    edge: EdgeConfig = setting(default_factory=EdgeConfig)
    # NCCL's own telemetry on this node (Inspector files, ncclras): None, not read.
    nccl: NcclSourceConfig | None = setting(None, part=NcclSourceConfig)
    # Discovery of the host's internals (collectors.sidecar.discovery): "on" (the host's
    # tools), "off", or a directory of recorded tool outputs; how often it runs again, and how
    # long each tool may take.
    discover: str = setting("on", flag="--discover", env="C4_DISCOVER",
                            help="Tell the daemon what this host is made of (GPUs, NICs, which "
                                 "NIC each GPU uses, switch ports): on (run nvidia-smi topo -m, "
                                 "ibdev2netdev, lldpctl, read sysfs), off, or a DIRECTORY of "
                                 "their saved outputs (nvidia-smi.txt, ibdev2netdev.txt, "
                                 "lldpctl.json).")
    discover_interval_s: float = setting(300.0, flag="--discover-interval",
                                         env="C4_DISCOVER_INTERVAL", check=positive,
                                         help="Seconds between discoveries; what changed is "
                                              "sent again.")
    discover_timeout_s: float = setting(20.0, check=positive)

    def __post_init__(self) -> None:
        validate(self, SidecarConfigError)
        if ":" not in self.daemon:
            raise SidecarConfigError(f"--daemon address {self.daemon!r} needs HOST:PORT")
        if self.max_frame_bytes > self.max_request_bytes:
            raise SidecarConfigError(
                f"--max-frame-bytes ({self.max_frame_bytes}) must not exceed "
                f"--max-request-bytes ({self.max_request_bytes}): one frame may travel as one "
                "request")
