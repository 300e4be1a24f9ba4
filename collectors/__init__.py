"""The per-rank collector: hooks torch.distributed and ships one row per call to the sidecar.

Either one line in the training script::

    import collectors; collectors.install()

or none, when launched through ``c4 run -- torchrun ...`` (see ``collectors/README.md``).

This module imports neither torch nor numpy: ``c4 run``'s site hook imports it in every Python
process of the job, including ones that never touch torch.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from collectors.errors import CollectorError, ConfigError, TorchUnavailableError

if TYPE_CHECKING:
    from collectors.collector import Collector, CollectorCounters

__all__ = ["CollectorError", "ConfigError", "TorchUnavailableError", "current", "flush",
           "install", "stats", "uninstall"]

_lock = threading.Lock()
_current: Collector | None = None


def install(config: Any = None, **overrides: Any) -> Collector:
    """Hook torch.distributed in this process (idempotent) and return the collector.

    ``config`` is a ``collectors.config.CollectorConfig``; without one, settings come from the
    ``C4_*`` environment variables, and keyword ``overrides`` replace single fields.

    Raises:
        TorchUnavailableError: torch.distributed cannot be imported.
        ConfigError: a setting has a bad value.
    """
    global _current
    with _lock:
        if _current is not None:
            return _current
        try:
            import torch.distributed as dist
        except ImportError as exc:
            raise TorchUnavailableError(
                f"cannot import torch.distributed ({exc}); install torch on training hosts "
                "(pip install 'c4[torch]')") from exc
        if not dist.is_available():
            raise TorchUnavailableError("this torch build has no torch.distributed support")
        from collectors.collector import Collector
        from collectors.config import CollectorConfig

        cfg = config if config is not None else CollectorConfig(**overrides)
        if config is not None and overrides:
            import dataclasses

            cfg = dataclasses.replace(config, **overrides)
        collector = Collector(cfg)
        collector.install()
        _current = collector
        return collector


def uninstall() -> None:
    """Restore the original torch.distributed functions and ship what is left."""
    global _current
    with _lock:
        collector, _current = _current, None
    if collector is not None:
        collector.uninstall()


def current() -> Collector | None:
    """The installed collector, if any."""
    return _current


def flush(timeout: float = 2.0) -> bool:
    """Ship every row recorded so far; False if the sidecar did not take them within ``timeout``."""
    collector = _current
    return collector.flush(timeout) if collector is not None else True


def stats() -> CollectorCounters | None:
    """This process's counters (recorded, dropped, shipped, ...), or None if not installed."""
    collector = _current
    return collector.counters() if collector is not None else None
