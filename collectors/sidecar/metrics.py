"""Prometheus metrics of one sidecar, read from its counters at scrape time.

Each sidecar has its own registry (tests run several in one process), served on ``/metrics``
when ``--metrics`` is given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from diagnosis.daemon.metrics import MetricsServer, counter, gauge

if TYPE_CHECKING:
    from collectors.sidecar.sidecar import Sidecar


class SidecarMetrics(Collector):
    def __init__(self, sidecar: Sidecar) -> None:
        self._car = sidecar
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        car = self._car
        s = car.outbox.stats
        with car._lock:
            received, rejected_local = car.received, car.rejected
            collectors = list(car._collectors.values())
        yield counter("c4_sidecar_received_records", "Op records received from local ranks.",
                      received)
        yield counter("c4_sidecar_queued_requests", "Requests queued for the daemon.", s.queued)
        yield counter("c4_sidecar_shipped_requests",
                      "Requests the daemon acknowledged as stored.", s.shipped)
        yield counter("c4_sidecar_duplicate_requests",
                      "Requests the daemon already had (resent after a reconnect).",
                      s.duplicates)
        yield counter("c4_sidecar_rejected_requests",
                      "Requests refused for good (malformed, unknown job) or malformed frames.",
                      s.rejected + rejected_local)
        yield counter("c4_sidecar_throttled_requests",
                      "Requests the daemon asked to resend later (over a rate or job limit).",
                      s.throttled)
        yield counter("c4_sidecar_spilled_requests", "Requests written to the disk spill.",
                      s.spilled)
        yield counter("c4_sidecar_dropped_requests",
                      "Requests dropped because the spill was full.", s.dropped)
        yield counter("c4_sidecar_reconnects", "Streams opened to the daemon.", s.reconnects)
        yield gauge("c4_sidecar_spill_bytes", "Bytes in the spill directory.", car.spill.bytes)
        yield gauge("c4_sidecar_unacked_requests",
                    "Requests not yet acknowledged (in memory, in flight, or spilled segments).",
                    car.outbox.pending())
        yield gauge("c4_sidecar_connected", "1 while a stream to the daemon is open.",
                    1.0 if car.outbox.connected else 0.0)
        dropped = CounterMetricFamily("c4_sidecar_collector_dropped_records",
                                      "Records a rank's collector dropped (sidecar slow/absent), "
                                      "as last reported.", labels=["job", "rank"])
        for c in collectors:
            dropped.add_metric([c.job, str(c.rank)], c.dropped)
        yield dropped
        yield GaugeMetricFamily("c4_sidecar_collectors", "Ranks reporting to this sidecar.",
                                value=len(collectors))
        e = car.edge.stats
        yield counter("c4_sidecar_records_out",
                      "Records shipped to the daemon, every kind (reduced or not), detail aside.",
                      e.records_out)
        yield counter("c4_sidecar_bytes_out", "Bytes of the requests of those records.",
                      e.bytes_out)
        yield counter("c4_sidecar_late_steps",
                      "Sampling steps that arrived after calls they cover (mended from the "
                      "detail ring).", e.late_steps)
        yield counter("c4_sidecar_detail_requests", "Detail requests from the daemon.",
                      e.detail_requests)
        yield counter("c4_sidecar_detail_refused",
                      "Detail requests for a range the ring no longer held.", e.detail_refused)
        yield counter("c4_sidecar_detail_records", "Full records sent for detail requests.",
                      e.detail_rows)
        yield gauge("c4_sidecar_detail_ring_bytes", "Bytes of full records held for detail.",
                    car.edge.ring.bytes)


def serve_metrics(sidecar: Sidecar, listen: str) -> MetricsServer:
    return MetricsServer(listen, SidecarMetrics(sidecar).registry)
