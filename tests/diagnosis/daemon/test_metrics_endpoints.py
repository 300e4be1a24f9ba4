"""Prometheus /metrics of the daemon and the sidecar, scraped over HTTP: the values move as
telemetry flows, and several instances in one process keep separate registries."""

from __future__ import annotations

import gc
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from c4.proto import c4_pb2
from c4.security.channel import ClientSecurity
from collectors.sidecar.config import SidecarConfig
from collectors.sidecar.sidecar import Sidecar
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.frames import RankConnection, group_info, op_batch, rank_info
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _req(seq: int, body: c4_pb2.IngestRequest, sidecar: str = "m") -> c4_pb2.IngestRequest:
    body.sidecar, body.seq = sidecar, seq
    return body


@pytest.fixture
def daemon():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            metrics_listen="127.0.0.1:0"))
    d.start()
    assert d.metrics_server is not None
    yield d
    d.stop(grace=1)


def test_metrics_are_off_by_default():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://"))
    d.start()
    try:
        assert d.metrics_server is None
    finally:
        d.stop(grace=1)


def test_daemon_metrics_move(daemon):
    port = daemon.metrics_server.port
    assert daemon.metrics_server.host == "127.0.0.1"
    before = scrape(port)
    assert value(before, "c4_daemon_ingest_records_total") == 0
    assert ("c4_daemon_writer_queue_depth", ()) in before
    assert value(before, "c4_daemon_open_faults") == 0
    with DaemonClient(f"127.0.0.1:{daemon.port}", security=ClientSecurity()) as c:
        c.send(_req(1, rank_info("mj", 0, 1, "node0")))
        c.send(_req(2, op_batch("mj", 0, range(250))))
        c.send(_req(2, op_batch("mj", 0, range(250))))  # a resend: duplicate
        with pytest.raises(DaemonError):
            c.send(_req(3, op_batch("nobody", 0, range(3))))
    after = scrape(port)
    assert value(after, "c4_daemon_ingest_records_total") == 250
    assert value(after, "c4_daemon_ingest_requests_total", kind="ops") == 3
    assert value(after, "c4_daemon_ingest_requests_total", kind="rank") == 1
    assert value(after, "c4_daemon_stored_requests_total") == 2
    assert value(after, "c4_daemon_duplicate_requests_total") == 1
    assert value(after, "c4_daemon_rejected_requests_total", code="NOT_FOUND") == 1
    assert value(after, "c4_daemon_ack_latency_seconds_count") == 3
    assert value(after, "c4_daemon_store_write_seconds_count") >= 1
    assert value(after, "c4_daemon_store_write_seconds_sum") > 0
    assert value(after, "c4_daemon_jobs") == 1 and value(after, "c4_daemon_sidecars") == 1
    assert value(after, "c4_daemon_unacked_requests") == 0
    # Python's collector runs all along (every thread stands still meanwhile)
    gc.collect()
    done = scrape(port)
    assert value(done, "c4_daemon_gc_collections_total", generation="2") \
        > value(before, "c4_daemon_gc_collections_total", generation="2")
    assert value(done, "c4_daemon_gc_seconds_total", generation="2") > 0
    assert ("c4_daemon_gc_frozen_objects", ()) in done


def test_two_daemons_keep_separate_registries(daemon):
    other = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                                metrics_listen="127.0.0.1:0"))
    other.start()
    try:
        with DaemonClient(f"127.0.0.1:{daemon.port}", security=ClientSecurity()) as c:
            c.send(_req(1, rank_info("one", 0, 1, "node0")))
            c.send(_req(2, op_batch("one", 0, range(40))))
        assert value(scrape(daemon.metrics_server.port), "c4_daemon_ingest_records_total") == 40
        assert value(scrape(other.metrics_server.port), "c4_daemon_ingest_records_total") == 0
    finally:
        other.stop(grace=1)


def test_sidecar_metrics_move(daemon, tmp_path):
    car = Sidecar(SidecarConfig(daemon=f"127.0.0.1:{daemon.port}",
                                socket_path=tmp_path / "car.sock", host="node0",
                                spill_dir=tmp_path / "spill", flush_interval_s=0.05,
                                stats_interval_s=0.2, metrics_listen="127.0.0.1:0"))
    car.start()
    try:
        port = car.metrics_server.port
        assert value(scrape(port), "c4_sidecar_received_records_total") == 0
        rank = RankConnection(tmp_path / "car.sock")
        rank.send(rank_info("sc", 0, 1, "node0"), group_info("sc", "0", [0]),
                  *(op_batch("sc", 0, range(i, i + 100)) for i in range(0, 500, 100)))
        wait_for(lambda: value(scrape(port), "c4_sidecar_received_records_total") == 500, 20,
                 what="500 records counted by the sidecar")
        wait_for(lambda: value(scrape(daemon.metrics_server.port),
                               "c4_daemon_ingest_records_total") == 500, 20,
                 what="500 records counted by the daemon")
        samples = wait_for(lambda: (s := scrape(port)) and
                           value(s, "c4_sidecar_unacked_requests") == 0 and s, 20,
                           what="nothing left unacknowledged")
        assert value(samples, "c4_sidecar_shipped_requests_total") >= 3  # rank, group, ops
        assert value(samples, "c4_sidecar_connected") == 1
        assert value(samples, "c4_sidecar_dropped_requests_total") == 0
        assert ("c4_sidecar_spill_bytes", ()) in samples
        # the daemon sees the sidecar's own statistics too
        wait_for(lambda: ("c4_daemon_sidecar_spill_bytes", (("sidecar", car.id),))
                 in scrape(daemon.metrics_server.port), 20, what="sidecar stats at the daemon")
        rank.close()
    finally:
        car.stop(timeout=5)


def test_every_component_registers_with_the_registry_it_is_given():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://"), registry=registry)
    d.start()
    try:
        with DaemonClient(f"127.0.0.1:{d.port}", security=ClientSecurity()) as c:
            c.send(_req(1, rank_info("inj", 0, 1, "node0")))
            c.send(_req(2, op_batch("inj", 0, range(30))))
        # one family from each component: writer, ingest, live, open faults, job series
        assert registry.get_sample_value("c4_daemon_stored_requests_total") == 2
        assert registry.get_sample_value("c4_daemon_ingest_requests_total",
                                         {"kind": "ops"}) == 1
        assert registry.get_sample_value("c4_daemon_ingest_records_total") == 30
        assert registry.get_sample_value("c4_daemon_open_faults") == 0
        assert registry.get_sample_value("c4_job_collective_seconds_count",
                                         {"job": "inj", "kind": "collective"}) == 30
    finally:
        d.stop(grace=1)
