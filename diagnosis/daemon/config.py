"""Daemon settings, declared once: each field carries its ``c4 daemon`` flag, its ``C4_*``
environment variable, its help and its range (``c4.settings``); ``c4 daemon``'s options are
derived from them."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from c4.settings import (
    DAY_S,
    at_least,
    format_duration,
    non_negative,
    parse_duration,
    positive,
    setting,
    validate,
)
from diagnosis.daemon.bounds import Bounds
from diagnosis.daemon.budget import BudgetConfig
from diagnosis.daemon.detail import DetailConfig
from diagnosis.daemon.inspection import InspectConfig
from diagnosis.daemon.jobs import JobLimits
from diagnosis.errors import ConfigError

#: the largest request the daemon reads and answer it sends (its clients read answers this large)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

DEFAULT_ADDRESS = "127.0.0.1:7444"


def default_store_url() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'c4' / 'c4.db'}"


def daemon_address() -> str:
    """Where clients find the daemon: ``C4_DAEMON`` or the default loopback address."""
    return os.environ.get("C4_DAEMON") or DEFAULT_ADDRESS


@dataclass(frozen=True)
class DaemonConfig:
    listen: str = setting(DEFAULT_ADDRESS, flag="--listen", env="C4_LISTEN",
                          help="HOST:PORT to serve gRPC on (loopback unless told otherwise).")
    store: str = setting("", flag="--store", env="C4_STORE",
                         help="sqlite:///PATH (default under ~/.local/share/c4) or "
                              "clickhouse://USER:PASS@HOST:PORT/DB.")
    # read by ``c4 daemon``, which loads it and hands the model to the daemon
    topology: str = setting("", flag="--topology", env="C4_TOPOLOGY",
                            help="Cluster topology file (node-link JSON) for localization; "
                                 "each job's hosts, as their sidecars discover them, are "
                                 "merged into it.")
    # Group commit: the writer waits at most this long to gather requests into one transaction.
    commit_interval_s: float = setting(0.02, check=positive)
    # Requests (and their rows) waiting to be stored; past either the ingest streams stop
    # reading (backpressure).
    max_pending_requests: int = setting(512, check=at_least(1))
    max_pending_records: int = setting(1_000_000, check=at_least(1))
    max_message_bytes: int = setting(MAX_MESSAGE_BYTES, check=at_least(1))
    max_records_per_batch: int = setting(1_000_000, check=at_least(1))
    # How often the live detectors look at every job; stored rows waiting for them (past it
    # the writer waits).
    analyze_interval_s: float = setting(1.0, flag="--analyze-interval",
                                        env="C4_ANALYZE_INTERVAL", check=positive,
                                        help="Seconds between runs of the live detectors.")
    live_backlog_records: int = setting(1_000_000, check=at_least(1))
    # RPC threads. Every sidecar holds one ingest stream (a thread) open, every ``c4 faults
    # watch`` one Watch stream: more than ``max_streams`` / ``max_watches`` at once are refused
    # with RESOURCE_EXHAUSTED instead of waiting for a thread for ever; the rest of the threads
    # stay free for queries and ``c4 status``. ``max_watches`` 0: half the threads the streams
    # leave.
    workers: int = setting(512, flag="--workers", env="C4_WORKERS", check=at_least(1),
                           help="RPC threads: one per open ingest stream and fault watch, plus "
                                "queries.")
    max_streams: int = setting(480, flag="--max-streams", env="C4_MAX_STREAMS",
                               check=at_least(1),
                               help="Ingest streams (sidecars) served at once; more are told to "
                                    "back off. Needs --workers above it.")
    max_watches: int = setting(0, flag="--max-watches", env="C4_MAX_WATCHES",
                               check=non_negative,
                               help="`c4 faults watch` streams served at once; more are "
                                    "refused. 0: half the threads --max-streams leaves.")
    # Security: TLS certificate and key; a client CA makes TLS mutual; a token file turns on
    # role checks. Plaintext on a non-loopback address needs ``insecure``.
    tls_cert: str = setting("", flag="--tls-cert", env="C4_TLS_CERT",
                            help="PEM certificate: serve gRPC over TLS (with --tls-key).")
    tls_key: str = setting("", flag="--tls-key", env="C4_TLS_KEY",
                           help="PEM private key of --tls-cert.")
    tls_client_ca: str = setting("", flag="--tls-client-ca", env="C4_TLS_CLIENT_CA",
                                 help="Mutual TLS: require client certificates signed by this "
                                      "CA (PEM).")
    tokens_file: str = setting("", flag="--tokens", env="C4_TOKENS_FILE",
                               help="Token file, one `TOKEN ROLE` per line (roles: ingest, "
                                    "read, act, admin); also C4_INGEST_TOKEN, C4_READ_TOKEN, "
                                    "C4_ACT_TOKEN, C4_ADMIN_TOKEN. None: no token checks.")
    insecure: bool = setting(False, flag="--insecure", env="C4_INSECURE",
                             help="Allow plaintext gRPC on a non-loopback address.")
    # Limits: ingest requests per second per sender (who it proves to be and its address, not
    # the sidecar id it declares; 0: none); what one request may hold (``bounds``); live jobs,
    # how long a silent job stays live (and in the live view), and their memory (``jobs``).
    max_requests_per_second: float = setting(
        1000.0, flag="--max-requests-per-second", env="C4_MAX_RPS", check=non_negative,
        help="Ingest requests (batches) per second per sender (its certificate or token, and "
             "its address); over it the sender is told to back off (0: no limit).")
    bounds: Bounds = setting(default_factory=Bounds)
    jobs: JobLimits = setting(default_factory=JobLimits)
    # Jobs not heard from for this long are removed from the store, and the requests the
    # store remembers (to recognise resends) are forgotten after it; 0: keep everything.
    retention_s: float = setting(30 * DAY_S, flag="--retention", env="C4_RETENTION",
                                 cli_type=str, parse=parse_duration, to_cli=format_duration,
                                 check=non_negative,
                                 help="Jobs silent this long are removed from the store, and "
                                      "the requests it remembers (to recognise resends) "
                                      "forgotten; records older than this are refused. 0: "
                                      "keep everything.")
    # Prometheus ``/metrics``: "" (off), PORT (on loopback) or HOST:PORT; HTTPS with the
    # daemon's certificate when it has one; plaintext beyond loopback only with
    # ``metrics_insecure``.
    metrics_listen: str = setting("", flag="--metrics", env="C4_METRICS",
                                  help="Serve Prometheus /metrics on PORT (loopback) or "
                                       "HOST:PORT (HTTPS with --tls-cert; plaintext beyond "
                                       "loopback needs --metrics-insecure); off by default.")
    metrics_insecure: bool = setting(False, flag="--metrics-insecure",
                                     env="C4_METRICS_INSECURE",
                                     help="Allow plaintext /metrics on a non-loopback address.")
    metrics_jobs: int = setting(256, flag="--metrics-jobs", env="C4_METRICS_JOBS",
                                check=at_least(1),
                                help="Jobs with their own series on /metrics (step time, call "
                                     "times): the most recently heard.")
    # Reduced telemetry: each job's records budget (sampling factor, windows), and the full
    # records pulled from the nodes around a report (``budget``, ``detail``).
    budget: BudgetConfig = setting(default_factory=BudgetConfig)
    detail: DetailConfig = setting(default_factory=DetailConfig)
    # the processes a hang report blames: PID, host, stack, Flight Recorder dump
    inspect: InspectConfig = setting(default_factory=InspectConfig)

    def __post_init__(self) -> None:
        validate(self, ConfigError)
        if not self.store:
            object.__setattr__(self, "store", default_store_url())
        if ":" not in self.listen:
            raise ConfigError(f"--listen address {self.listen!r} needs HOST:PORT")
        if self.max_streams >= self.workers:
            raise ConfigError(f"--max-streams ({self.max_streams}) must be below --workers "
                              f"({self.workers}): queries need threads too")
        if not self.max_watches:
            object.__setattr__(self, "max_watches",
                               max(1, (self.workers - self.max_streams) // 2))
        if self.max_streams + self.max_watches >= self.workers:
            raise ConfigError(f"--max-streams ({self.max_streams}) plus --max-watches "
                              f"({self.max_watches}) must stay below --workers "
                              f"({self.workers}): queries and `c4 status` need threads too")
        if self.retention_s and self.retention_s < self.jobs.idle_s:
            raise ConfigError(f"the retention ({self.retention_s:g} s) must be at least the "
                              f"time a silent job stays live ({self.jobs.idle_s:g} s, "
                              "--job-idle)")
        if self.retention_s and self.bounds.max_age_s > self.retention_s:
            # a resend older than the retention is no longer recognised as one: the door must
            # refuse records that old, or it would store them twice
            object.__setattr__(self, "bounds", replace(self.bounds, max_age_s=self.retention_s))
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("TLS needs both --tls-cert and --tls-key")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key too")
        if self.metrics_listen:
            from c4.security.server import check_metrics_listen

            check_metrics_listen(self.metrics_listen, tls=bool(self.tls_cert),
                                 insecure=self.metrics_insecure)
