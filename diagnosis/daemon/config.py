"""Daemon settings: command-line flags with ``C4_*`` environment fallbacks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from diagnosis.daemon.bounds import DAY_S, Bounds
from diagnosis.daemon.budget import BudgetConfig
from diagnosis.daemon.detail import DetailConfig
from diagnosis.daemon.inspection import InspectConfig
from diagnosis.daemon.jobs import JobLimits

DEFAULT_ADDRESS = "127.0.0.1:7444"


def default_store_url() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'c4' / 'c4.db'}"


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``30d`` -> seconds (``0``: off where allowed)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S}
    raw = text.strip().lower()
    scale = units.get(raw[-1:])
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"duration {text!r} is not a number of seconds or a number with s, m, "
                         "h or d (e.g. 30d)") from None
    if value < 0:
        raise ValueError(f"duration {text!r} is negative")
    return value


def parse_size(text: str) -> int:
    """``1048576``, ``512M``, ``4G`` (``K``/``M``/``G``/``T``, powers of 1024) -> bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(raw[-1:])
    number = raw[:-1] if scale is not None else raw
    try:
        value = int(float(number) * (scale or 1))
    except ValueError:
        raise ValueError(f"size {text!r} is not a number of bytes or a number with K, M, G or T "
                         "(e.g. 4G)") from None
    if value < 0:
        raise ValueError(f"size {text!r} is negative")
    return value


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
    # the writer waits).
    analyze_interval_s: float = 1.0
    live_backlog_records: int = 1_000_000
    # RPC threads. Every sidecar holds one ingest stream (a thread) open, every ``c4 faults
    # watch`` one Watch stream: more than ``max_streams`` / ``max_watches`` at once are refused
    # with RESOURCE_EXHAUSTED instead of waiting for a thread for ever; the rest of the threads
    # stay free for queries and ``c4 status``. ``max_watches`` 0: half the threads the streams
    # leave.
    workers: int = 512
    max_streams: int = 480
    max_watches: int = 0
    # Security: TLS certificate and key; a client CA makes TLS mutual; a token file turns on
    # role checks. Plaintext on a non-loopback address needs ``insecure``.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    tokens_file: str = ""
    insecure: bool = False
    # Limits: ingest requests per second per sender (who it proves to be and its address, not
    # the sidecar id it declares; 0: none); what one request may hold (``bounds``); live jobs,
    # how long a silent job stays live (and in the live view), and their memory (``jobs``).
    max_requests_per_second: float = 1000.0
    bounds: Bounds = field(default_factory=Bounds)
    jobs: JobLimits = field(default_factory=JobLimits)
    # Jobs not heard from for this long are removed from the store, and the requests the
    # store remembers (to recognise resends) are forgotten after it; 0: keep everything.
    retention_s: float = 30 * DAY_S
    # Prometheus ``/metrics``: "" (off), PORT (on loopback) or HOST:PORT; HTTPS with the
    # daemon's certificate when it has one; plaintext beyond loopback only with
    # ``metrics_insecure``.
    metrics_listen: str = ""
    metrics_insecure: bool = False
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
        if self.max_watches < 0:
            raise ValueError(f"max_watches must be >= 0 (0: automatic), got {self.max_watches}")
        if not self.max_watches:
            object.__setattr__(self, "max_watches",
                               max(1, (self.workers - self.max_streams) // 2))
        if self.max_streams + self.max_watches >= self.workers:
            raise ValueError(f"max_streams ({self.max_streams}) plus max_watches "
                             f"({self.max_watches}) must stay below workers ({self.workers}): "
                             "queries and `c4 status` need threads too")
        if self.retention_s < 0:
            raise ValueError(f"retention_s must be >= 0 (0: keep everything), got "
                             f"{self.retention_s}")
        if self.retention_s and self.retention_s < self.jobs.idle_s:
            raise ValueError(f"the retention ({self.retention_s:g} s) must be at least the time "
                             f"a silent job stays live ({self.jobs.idle_s:g} s, --job-idle)")
        if self.retention_s and self.bounds.max_age_s > self.retention_s:
            # a resend older than the retention is no longer recognised as one: the door must
            # refuse records that old, or it would store them twice
            object.__setattr__(self, "bounds", replace(self.bounds, max_age_s=self.retention_s))
        for name in ("commit_interval_s", "analyze_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("max_pending_requests", "max_pending_records", "max_message_bytes",
                     "max_records_per_batch", "live_backlog_records", "workers", "max_streams"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_requests_per_second < 0:
            raise ValueError("max_requests_per_second must be >= 0 (0: no limit), got "
                             f"{self.max_requests_per_second}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key too")
        if self.metrics_listen:
            from c4.security.server import check_metrics_listen

            check_metrics_listen(self.metrics_listen, tls=bool(self.tls_cert),
                                 insecure=self.metrics_insecure)
