"""The Grafana dashboard is valid JSON and every expression in it names a metric that a real
daemon or sidecar exports on /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from collectors.sidecar.config import SidecarConfig
from collectors.sidecar.sidecar import Sidecar
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.diagnosis.daemon.test_metrics_endpoints import scrape

pytestmark = [pytest.mark.network]

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "c4.json"
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def _expressions(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for v in node.values() for e in _expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in _expressions(v)]
    return []


def _exported(registry, http_port: int) -> set[str]:
    """Names the endpoint serves now, plus every name its families can serve (a labelled
    counter with no samples yet still appears in the registry)."""
    names = {name for name, _ in scrape(http_port)}
    for family in registry.collect():
        names.update(family.name + s for s in SUFFIXES)
    return names


def test_dashboard_expressions_use_exported_metrics(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    exprs = _expressions(dashboard)
    assert len(exprs) >= 10
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p.get("targets") for p in panels), "every panel queries something"

    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            metrics_listen="127.0.0.1:0"))
    d.start()
    car = Sidecar(SidecarConfig(daemon=f"127.0.0.1:{d.port}", socket_path=tmp_path / "s.sock",
                                host="node0", spill_dir=tmp_path / "spill",
                                metrics_listen="127.0.0.1:0"))
    car.start()
    try:
        exported = _exported(d.metrics.registry, d.metrics_server.port) | \
            _exported(car.metrics_server.registry, car.metrics_server.port)
    finally:
        car.stop(timeout=5)
        d.stop(grace=1)
    assert any(n.startswith("c4_sidecar_") for n in exported)
    referenced = {name for e in exprs for name in re.findall(r"\bc4_[a-z0-9_]+", e)}
    assert referenced, "the dashboard names c4 metrics"
    missing = sorted(referenced - exported)
    assert not missing, f"the dashboard uses metrics nobody exports: {missing}"
    # and it covers the headline signals
    for name in ("c4_daemon_ingest_records_total", "c4_daemon_ack_latency_seconds_bucket",
                 "c4_daemon_store_write_seconds_bucket", "c4_daemon_writer_queue_depth",
                 "c4_daemon_open_faults", "c4_sidecar_spill_bytes",
                 "c4_sidecar_unacked_requests", "c4_sidecar_dropped_requests_total"):
        assert name in referenced, name
