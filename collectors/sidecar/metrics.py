"""Prometheus metrics of one sidecar, read from its counters at scrape time.

Each sidecar has its own registry (tests run several in one process), served on ``/metrics``
when ``--metrics`` is given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from c4.metrics import MetricsServer, counter, gauge
from collectors.sidecar.counters import REASONS, Drops
from collectors.sidecar.discovery import HostDiscovery
from collectors.sidecar.edge import Edge
from collectors.sidecar.intake import Intake
from collectors.sidecar.local import CLOSE_REASONS, LocalListener
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.owners import Owners
from collectors.sidecar.spill import Spill


class Observed(Protocol):
    """The parts of a sidecar (``collectors.sidecar.sidecar.Sidecar``) its metrics read."""

    @property
    def outbox(self) -> Outbox: ...

    @property
    def intake(self) -> Intake: ...

    @property
    def drops(self) -> Drops: ...

    @property
    def listener(self) -> LocalListener: ...

    @property
    def discovery(self) -> HostDiscovery | None: ...

    @property
    def spill(self) -> Spill: ...

    @property
    def owners(self) -> Owners: ...

    @property
    def edge(self) -> Edge: ...


def _by_reason(name: str, doc: str, values: dict[str, int], reasons: dict[str, str]
               ) -> CounterMetricFamily:
    family = CounterMetricFamily(name, f"{doc} Reasons: " + "; ".join(
        f"{r}: {what}" for r, what in reasons.items()) + ".", labels=["reason"])
    for reason in reasons:  # every reason, zero included, so that rate() sees it start
        family.add_metric([reason], values.get(reason, 0))
    return family


class SidecarMetrics(Collector):
    def __init__(self, sidecar: Observed) -> None:
        self._car = sidecar
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        car = self._car
        s = car.outbox.stats
        yield counter("c4_sidecar_received_records", "Op records received from local ranks.",
                      car.intake.received)
        yield counter("c4_sidecar_queued_requests", "Requests queued for the daemon.", s.queued)
        yield counter("c4_sidecar_shipped_requests",
                      "Requests the daemon acknowledged as stored.", s.shipped)
        yield counter("c4_sidecar_duplicate_requests",
                      "Requests the daemon already had (resent after a reconnect or restart).",
                      s.duplicates)
        yield counter("c4_sidecar_rejected_requests",
                      "Requests the daemon refused for good (malformed, unknown job), and "
                      "frames refused here.", s.rejected + car.drops.frames_total())
        yield counter("c4_sidecar_throttled_requests",
                      "Requests the daemon asked to resend later (over its rate limit).",
                      s.throttled)
        yield counter("c4_sidecar_parked_requests",
                      "Requests held back because the daemon parked their job (over a job "
                      "limit: resent later while the other jobs flow).", s.parked)
        yield counter("c4_sidecar_spilled_requests",
                      "Requests read back from the write-ahead log (memory bound, restart).",
                      s.spilled)
        yield counter("c4_sidecar_recovered_requests",
                      "Unacknowledged requests found in the log at start-up.", s.recovered)
        yield counter("c4_sidecar_dropped_requests", "Requests given up (see the dropped "
                      "records by reason).", s.dropped)
        yield _by_reason("c4_sidecar_dropped_records", "Op records dropped, counted.",
                         car.drops.records(), REASONS)
        yield _by_reason("c4_sidecar_refused_frames", "Frames from local connections refused.",
                         car.drops.frames(), REASONS)
        yield _by_reason("c4_sidecar_closed_connections",
                         "Local connections closed by the sidecar.", dict(car.listener.closed),
                         CLOSE_REASONS)
        yield counter("c4_sidecar_duplicate_frames",
                      "Frames a collector sent again that the sidecar already had (not taken "
                      "twice).", car.intake.duplicate_frames)
        yield counter("c4_sidecar_reconnects", "Streams opened to the daemon.", s.reconnects)
        disc = car.discovery
        if disc is not None:
            yield counter("c4_sidecar_discovery_rounds", "Discoveries of the host's GPUs, NICs "
                          "and pairing run.", disc.rounds)
            yield counter("c4_sidecar_discovery_sent", "Discoveries that found a change and "
                          "were sent to the daemon.", disc.shipped)
            yield counter("c4_sidecar_discovery_cpu_seconds", "CPU time the sidecar spent "
                          "discovering (the tools' own processes not included).", disc.cpu_s)
        yield counter("c4_sidecar_wal_syncs", "fsyncs of the write-ahead log.", car.spill.syncs)
        yield counter("c4_sidecar_wal_sync_seconds", "Time spent in those fsyncs.",
                      car.spill.sync_seconds)
        yield gauge("c4_sidecar_spill_bytes", "Bytes in the write-ahead log.", car.spill.bytes)
        yield gauge("c4_sidecar_memory_bytes", "Bytes of requests held in memory.",
                    car.outbox.memory_bytes())
        yield gauge("c4_sidecar_unacked_requests",
                    "Requests not yet acknowledged (in memory, in flight, or in the log).",
                    car.outbox.pending())
        yield gauge("c4_sidecar_connected", "1 while a stream to the daemon is open.",
                    1.0 if car.outbox.connected else 0.0)
        yield gauge("c4_sidecar_local_connections", "Open connections from local ranks.",
                    car.listener.connections())
        yield gauge("c4_sidecar_owned_jobs", "Jobs with an owner (a local uid) on this node.",
                    len(car.owners))
        collectors = car.intake.collectors.values()
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


def serve_metrics(sidecar: Observed, listen: str) -> MetricsServer:
    return MetricsServer(listen, SidecarMetrics(sidecar).registry)
