"""Collector settings: constructor arguments, else ``C4_*`` environment variables, else defaults."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from collectors.errors import ConfigError
from collectors.wire import default_socket_path

ENV_COLLECT = "C4_COLLECT"


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number; set it to e.g. {default}") from None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer; set it to e.g. {default}") from None


def _job_from_env() -> str:
    return os.environ.get("C4_JOB") or os.environ.get("TORCHELASTIC_RUN_ID") or "default"


def _attempt_from_env() -> int:
    # C4_ATTEMPT first: a supervisor that relaunches torchrun afresh (c4 launch) numbers the
    # attempts, while torchrun's own restart count starts from 0 at every launch.
    for name in ("C4_ATTEMPT", "TORCHELASTIC_RESTART_COUNT"):
        if os.environ.get(name):
            return _env_int(name, 0)
    return 0


@dataclass(frozen=True)
class CollectorConfig:
    """How a rank's collector records and ships.

    Every field defaults from the environment when the config is built with ``from_env()``.
    """

    #: Unix socket of the node's sidecar (``C4_SIDECAR_SOCKET``).
    socket_path: Path = field(default_factory=default_socket_path)
    #: Job name (``C4_JOB``, else ``TORCHELASTIC_RUN_ID``, else "default").
    job: str = field(default_factory=_job_from_env)
    #: Restart count (``C4_ATTEMPT``, else ``TORCHELASTIC_RESTART_COUNT``, else 0).
    attempt: int = field(default_factory=_attempt_from_env)
    #: Topology host id (``C4_HOST``, else the hostname).
    host: str = field(default_factory=lambda: os.environ.get("C4_HOST") or socket.gethostname())
    #: Topology GPU and NIC ids of this rank, if known (``C4_GPU``, ``C4_NIC``).
    gpu: str = field(default_factory=lambda: os.environ.get("C4_GPU", ""))
    nic: str = field(default_factory=lambda: os.environ.get("C4_NIC", ""))
    #: Seconds between flushes (``C4_FLUSH_INTERVAL``).
    flush_interval_s: float = field(
        default_factory=lambda: _env_float("C4_FLUSH_INTERVAL", 0.1))
    #: Rows held while the sidecar is away; beyond this rows are dropped (``C4_BUFFER_ROWS``).
    buffer_rows: int = field(default_factory=lambda: _env_int("C4_BUFFER_ROWS", 65536))
    #: A call pending this long is shipped once as an open row (``C4_OPEN_AFTER``).
    open_after_s: float = field(default_factory=lambda: _env_float("C4_OPEN_AFTER", 0.5))
    #: A frame the sidecar does not take within this time is dropped (``C4_SEND_TIMEOUT``).
    send_timeout_s: float = field(default_factory=lambda: _env_float("C4_SEND_TIMEOUT", 2.0))
    #: Longest wait between reconnection attempts (``C4_RECONNECT_MAX``).
    reconnect_max_s: float = field(default_factory=lambda: _env_float("C4_RECONNECT_MAX", 2.0))
    #: End time of ``async_op=True`` calls (``C4_ASYNC_TIMING``, see ``completion.py``):
    #: "future" a callback on every Work's future (exact; ~10 µs of CPU per call on gloo),
    #: "poll" the first moment the Work is seen complete (~0.5 µs per call more than a sync
    #: call, plus a poller thread while async calls are in flight), "auto" future below ~1,000
    #: async calls/s and poll above ~2,000/s, "wait" the return of ``Work.wait()``.
    async_timing: str = field(
        default_factory=lambda: os.environ.get("C4_ASYNC_TIMING") or "auto")
    #: When polling: how often the shipper thread looks at outstanding async Works, only while
    #: there are some (``C4_POLL_INTERVAL``).
    poll_interval_s: float = field(
        default_factory=lambda: _env_float("C4_POLL_INTERVAL", 0.002))
    #: Route DDP's gradient all-reduces through torch's Python allreduce hook so that they are
    #: recorded, unless the program registers its own comm hook (``C4_DDP_HOOK``, 1 or 0).
    ddp_hook: bool = field(default_factory=lambda: os.environ.get("C4_DDP_HOOK", "1") != "0")
    #: No sidecar reached for this long: warn, once until one is (``C4_UNREACHABLE_WARN``).
    unreachable_warn_s: float = field(
        default_factory=lambda: _env_float("C4_UNREACHABLE_WARN", 5.0))
    #: How long the exit flush may take (``C4_EXIT_FLUSH``).
    exit_flush_s: float = field(default_factory=lambda: _env_float("C4_EXIT_FLUSH", 2.0))
    #: On SIGTERM, ship what is left for at most this long before the process dies as it would
    #: have; 0 leaves SIGTERM alone (``C4_TERM_FLUSH``). Usually done in tens of ms; the bound
    #: matters on a starved CPU, and launchers wait >= 30 s before SIGKILL.
    term_flush_s: float = field(default_factory=lambda: _env_float("C4_TERM_FLUSH", 0.5))

    def __post_init__(self) -> None:
        object.__setattr__(self, "socket_path", Path(self.socket_path))
        if not self.job:
            raise ConfigError("the job name is empty; set C4_JOB or pass job=")
        if self.attempt < 0:
            raise ConfigError(f"attempt={self.attempt} is negative; restart counts start at 0")
        if self.buffer_rows < 16:
            raise ConfigError(f"buffer_rows={self.buffer_rows} is too small; use at least 16")
        for name in ("flush_interval_s", "open_after_s", "send_timeout_s", "reconnect_max_s",
                     "poll_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.async_timing not in ("auto", "poll", "future", "wait"):
            raise ConfigError(f"async_timing={self.async_timing!r}: use 'auto', 'poll', "
                              "'future' or 'wait'")
        for name in ("exit_flush_s", "term_flush_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must not be negative")
