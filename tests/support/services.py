"""Real c4 daemons and sidecars as subprocesses for integration tests (c4.processes), with a
``wait_for`` that fails the test instead of raising TimeoutError."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from c4 import processes
from c4.demo.services import start_daemon, start_sidecar
from c4.processes import Service, free_port, torchrun_node

__all__ = ["Samples", "Service", "free_port", "scrape", "start_daemon", "start_sidecar",
           "torchrun_node", "wait_for"]


#: a Prometheus scrape: (metric name, sorted labels) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    """Every sample of the metrics endpoint at ``host:port``."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    try:
        return processes.wait_for(cond, timeout, interval, what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None
