"""Daemon settings: command-line flags with ``C4_*`` environment fallbacks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from diagnosis.daemon.budget import BudgetConfig
from diagnosis.daemon.detail import DetailConfig
from diagnosis.daemon.inspection import InspectConfig

DEFAULT_ADDRESS = "127.0.0.1:7444"


def default_store_url() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'c4' / 'c4.db'}"


def daemon_address() -> str:
    """Where clients find the daemon: ``C4_DAEMON`` or the default loopback address."""
    return os.environ.get("C4_DAEMON") or DEFAULT_ADDRESS


@dataclass(frozen=True)
class DaemonConfig:
    listen: str = DEFAULT_ADDRESS
    store: str = ""
    # Group commit: the writer waits at most this long to gather requests into one transaction.
    commit_interval_s: float = 0.02
    # Requests (and their rows) waiting to be stored; past either the ingest streams stop
    # reading (backpressure).
    max_pending_requests: int = 512
    max_pending_records: int = 1_000_000
    max_message_bytes: int = 64 * 1024 * 1024
    max_records_per_batch: int = 1_000_000
    # How often the live detectors look at every job; stored rows waiting for them (past it
    # the writer waits); how long a silent job stays in the live view.
    analyze_interval_s: float = 1.0
    live_backlog_records: int = 1_000_000
    live_idle_s: float = 1800.0
    # RPC threads. Every sidecar holds one ingest stream (a thread) open: more than
    # ``max_streams`` at once are refused with RESOURCE_EXHAUSTED instead of waiting for a
    # thread for ever; the rest of the threads stay free for queries.
    workers: int = 512
    max_streams: int = 480
    # Security: TLS certificate and key; a client CA makes TLS mutual; a token file turns on
    # role checks. Plaintext on a non-loopback address needs ``insecure``.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    tokens_file: str = ""
    insecure: bool = False
    # Limits: ingest requests per second per sender (who it proves to be and its address, not
    # the sidecar id it declares; 0: none), and jobs tracked.
    max_requests_per_second: float = 1000.0
    max_jobs: int = 10_000
    # Prometheus ``/metrics``: "" (off), PORT (on loopback) or HOST:PORT.
    metrics_listen: str = ""
    # Reduced telemetry: each job's records budget (sampling factor, windows), and the full
    # records pulled from the nodes around a report (``budget``, ``detail``).
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    detail: DetailConfig = field(default_factory=DetailConfig)
    # the processes a hang report blames: PID, host, stack, Flight Recorder dump
    inspect: InspectConfig = field(default_factory=InspectConfig)

    def __post_init__(self) -> None:
        if not self.store:
            object.__setattr__(self, "store", default_store_url())
        if ":" not in self.listen:
            raise ValueError(f"listen address {self.listen!r} needs HOST:PORT")
        if self.max_streams >= self.workers:
            raise ValueError(f"max_streams ({self.max_streams}) must be below workers "
                             f"({self.workers}): queries need threads too")
        for name in ("commit_interval_s", "analyze_interval_s", "live_idle_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("max_pending_requests", "max_pending_records", "max_message_bytes",
                     "max_records_per_batch", "live_backlog_records", "workers", "max_streams",
                     "max_jobs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_requests_per_second < 0:
            raise ValueError("max_requests_per_second must be >= 0 (0: no limit), got "
                             f"{self.max_requests_per_second}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key too")
