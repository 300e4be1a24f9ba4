"""Each daemon component's Prometheus collector: it reads one component's counters at scrape
time (so the ingest path pays nothing for them) and serves its latency histogram; and the
auth interceptor's refusals. The daemon registers them with the registry it is given
(``Daemon(registry=...)``); each daemon has its own, so several can live in one process."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from c4.metrics import counter, gauge, labelled
from diagnosis.daemon.ingest import IngestService
from diagnosis.daemon.live import LiveView
from diagnosis.daemon.writer import Writer


class WriterCollector(Collector):
    """The group commit: what it stored, what waits, how long commits take."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    def collect(self) -> Iterator[Metric]:
        wr = self._writer
        yield counter("c4_daemon_stored_requests", "Ingest requests stored.", wr.stored)
        yield counter("c4_daemon_duplicate_requests",
                      "Requests received again after being stored (acknowledged, not stored).",
                      wr.duplicates)
        yield counter("c4_daemon_store_errors",
                      "Failed store writes (retried until the store takes them).",
                      wr.store_errors)
        yield gauge("c4_daemon_writer_queue_depth", "Requests waiting for the next commit.",
                    wr.pending())
        yield gauge("c4_daemon_writer_queue_records", "Rows waiting for the next commit.",
                    wr.pending_records())
        yield from wr.commit_seconds.collect()


class IngestCollector(Collector):
    """The door: requests by kind and refusal, streams, sidecars and their own statistics."""

    def __init__(self, ingest: IngestService) -> None:
        self._ingest = ingest

    def collect(self) -> Iterator[Metric]:
        ing = self._ingest
        yield labelled(CounterMetricFamily, "c4_daemon_ingest_requests",
                       "Ingest requests received, by body (ops, rank, group, conns, stats).",
                       "kind", sorted(ing.received.items()))
        yield labelled(CounterMetricFamily, "c4_daemon_rejected_requests",
                       "Requests refused, by gRPC status (RESOURCE_EXHAUSTED: over a limit).",
                       "code", sorted(ing.rejected_by_code.items()))
        yield gauge("c4_daemon_ingest_streams", "Open ingest streams (one per sidecar).",
                    ing.streams)
        yield gauge("c4_daemon_unacked_requests",
                    "Requests accepted but not acknowledged yet (queued or being stored).",
                    ing.unacked)
        yield gauge("c4_daemon_sidecars", "Sidecars seen since the daemon started.",
                    len(ing.sidecars))
        yield gauge("c4_daemon_jobs", "Jobs known to the daemon.", ing.job_count())
        yield from ing.ack_seconds.collect()
        infos = [i for i in list(ing.sidecars.values()) if i.stats is not None]
        fields = (("dropped", CounterMetricFamily, "Records a sidecar dropped (spill full)."),
                  ("spilled", CounterMetricFamily, "Requests a sidecar spilled to disk."),
                  ("spill_bytes", GaugeMetricFamily, "Bytes in a sidecar's spill directory."))
        for field, kind, doc in fields:
            yield labelled(kind, f"c4_daemon_sidecar_{field}", doc + " As last reported.",
                           "sidecar", [(i.sidecar, getattr(i.stats, field)) for i in infos])


class LiveCollector(Collector):
    """The live detectors: what they took, how far behind they are, how long a pass takes."""

    def __init__(self, live: LiveView) -> None:
        self._live = live

    def collect(self) -> Iterator[Metric]:
        live = self._live
        yield counter("c4_daemon_ingest_records", "Op records stored (not counting duplicates).",
                      live.records_total)
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
        yield from live.analysis_seconds.collect()


class AuthDenials:
    """Calls the auth interceptor refused, by gRPC status code."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._counter = Counter("c4_daemon_auth_denied",
                                "Calls refused for a missing/unknown token or a role without "
                                "the right.", ["code"], registry=registry)

    def on_denied(self, code: grpc.StatusCode) -> None:
        self._counter.labels(code.name).inc()
