"""Real c4 daemons and sidecars as subprocesses for integration tests (c4.processes), with a
``wait_for`` that fails the test instead of raising TimeoutError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from c4 import processes
from c4.demo.services import start_daemon, start_sidecar
from c4.processes import Service, free_port, torchrun_node

__all__ = ["Service", "free_port", "start_daemon", "start_sidecar", "torchrun_node", "wait_for"]


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    try:
        return processes.wait_for(cond, timeout, interval, what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None
