"""Prometheus metrics of the daemon, served on ``/metrics`` when ``--metrics`` is given.

Counters the daemon already keeps (records, stored, duplicates, queue depth, ...) are read at
scrape time by a collector, so the ingest path pays nothing for them; only the two latency
histograms are observed as requests go. Each daemon has its own registry, so several daemons
(in tests) can live in one process."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from c4.metrics import counter, gauge, labelled

if TYPE_CHECKING:
    from diagnosis.daemon.server import Daemon

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class DaemonMetrics(Collector):
    """The daemon's registry: scrape-time readings plus the latency histograms."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ack_latency = Histogram(
            "c4_daemon_ack_latency_seconds",
            "From receiving an ingest request to acknowledging it as stored.",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.store_write = Histogram(
            "c4_daemon_store_write_seconds",
            "Duration of one group commit into the store.",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.analysis = Histogram(
            "c4_daemon_analysis_seconds",
            "Duration of one pass of the live detectors over every job.",
            buckets=(*LATENCY_BUCKETS, 30.0, 60.0), registry=self.registry)
        self._daemon: Daemon | None = None
        self.denied: dict[str, int] = {}

    def attach(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self.registry.register(self)

    def on_denied(self, code: Any) -> None:
        name = code.name
        self.denied[name] = self.denied.get(name, 0) + 1

    def describe(self) -> list[Metric]:
        return []  # collected lazily; describing would call collect() before attach

    def collect(self) -> Iterator[Metric]:
        d = self._daemon
        if d is None:
            return
        ing, wr = d.ingest, d.writer
        yield counter("c4_daemon_ingest_records", "Op records stored (not counting duplicates).",
                      d.live.records_total)
        yield labelled(CounterMetricFamily, "c4_daemon_ingest_requests",
                       "Ingest requests received, by body (ops, rank, group, conns, stats).",
                       "kind", sorted(ing.received.items()))
        yield counter("c4_daemon_stored_requests", "Ingest requests stored.", wr.stored)
        yield counter("c4_daemon_duplicate_requests",
                      "Requests received again after being stored (acknowledged, not stored).",
                      wr.duplicates)
        yield labelled(CounterMetricFamily, "c4_daemon_rejected_requests",
                       "Requests refused, by gRPC status (RESOURCE_EXHAUSTED: over a limit).",
                       "code", sorted(ing.rejected_by_code.items()))
        yield labelled(CounterMetricFamily, "c4_daemon_auth_denied",
                       "Calls refused for a missing/unknown token or a role without the right.",
                       "code", sorted(self.denied.items()))
        yield counter("c4_daemon_store_errors",
                      "Failed store writes (retried until the store takes them).",
                      wr.store_errors)
        yield gauge("c4_daemon_writer_queue_depth", "Requests waiting for the next commit.",
                    wr.pending())
        yield gauge("c4_daemon_writer_queue_records", "Rows waiting for the next commit.",
                    wr.pending_records())
        live = d.live
        yield gauge("c4_daemon_live_lag_seconds",
                    "Age of the oldest stored record the live detectors have not finished "
                    "judging (waiting for them, or not yet through a completed pass).",
                    live.lag())
        yield gauge("c4_daemon_live_backlog_records",
                    "Stored rows waiting to be given to the live detectors.", live.backlog())
        yield counter("c4_daemon_live_applied_records",
                      "Rows (and registrations) given to the live detectors.",
                      live.records_applied)
        yield counter("c4_daemon_live_backpressure_seconds",
                      "Time the writer waited because the live detectors were behind.",
                      live.backpressure_s)
        yield gauge("c4_daemon_live_jobs", "Jobs in the live view.", live.jobs())
        yield gauge("c4_daemon_ingest_streams", "Open ingest streams (one per sidecar).",
                    ing.streams)
        yield gauge("c4_daemon_unacked_requests",
                    "Requests accepted but not acknowledged yet (queued or being stored).",
                    ing.unacked)
        yield gauge("c4_daemon_sidecars", "Sidecars seen since the daemon started.",
                    len(ing.sidecars))
        yield gauge("c4_daemon_jobs", "Jobs known to the daemon.", ing.job_count())
        yield from self._store_readings(d)
        yield from self._sidecar_readings(d)

    def _store_readings(self, d: Daemon) -> Iterator[Metric]:
        try:
            open_faults = len(d.store.list_faults(open_only=True))
        except Exception as exc:  # a store outage must not break the scrape
            log.debug("open faults unavailable for metrics: %s", exc)
            return
        yield gauge("c4_daemon_open_faults", "Fault reports not yet resolved.", open_faults)

    def _sidecar_readings(self, d: Daemon) -> Iterator[Metric]:
        infos = [i for i in list(d.ingest.sidecars.values()) if i.stats is not None]
        fields = (("dropped", CounterMetricFamily, "Records a sidecar dropped (spill full)."),
                  ("spilled", CounterMetricFamily, "Requests a sidecar spilled to disk."),
                  ("spill_bytes", GaugeMetricFamily, "Bytes in a sidecar's spill directory."))
        for field, kind, doc in fields:
            yield labelled(kind, f"c4_daemon_sidecar_{field}", doc + " As last reported.",
                           "sidecar", [(i.sidecar, getattr(i.stats, field))
                                    for i in infos])


class TimedStore:
    """The store as the writer sees it, with every commit timed."""

    def __init__(self, store: Any, observe: Callable[[float], None]) -> None:
        self._store = store
        self._observe = observe

    def write(self, writes: list[Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return self._store.write(writes)
        finally:
            self._observe(time.perf_counter() - t0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
