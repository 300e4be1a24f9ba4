"""Open fault reports as Prometheus gauges, for alerts that page.

``c4_open_faults{job, kind, host}`` counts the open reports by job, kind and the host of the
most likely suspect ("" when that suspect lives on no host, e.g. a switch, or its rank's host
is unknown); ``c4_daemon_open_faults`` is their total. The tally follows every report the hub
files (``FaultHub.listeners``) and starts from the open reports stored, so a scrape reads no
report. Its series are bounded by the open reports, which close when their job ends.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from c4.report import FaultReport
from diagnosis.daemon.faults import FaultHub
from diagnosis.probes.adjust import host_of_suspect
from diagnosis.store import Store

log = logging.getLogger(__name__)


class OpenFaults(Collector):
    """The open reports' (job, kind, host), kept current from the hub's filings."""

    def __init__(self, hub: FaultHub, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._open: dict[str, tuple[str, str, str]] = {}
        self._rank_hosts: dict[str, dict[int, str]] = {}
        for report in store.list_faults(open_only=True):   # once, at start
            self.filed(report)
        hub.listeners.append(self.filed)

    def filed(self, report: FaultReport) -> None:
        """Count a stored report's latest revision (called in the filing thread)."""
        if report.state != "open":
            with self._lock:
                self._open.pop(report.id, None)
            return
        labels = (report.job, report.kind, self._host(report))
        with self._lock:
            self._open[report.id] = labels

    def forget_job(self, job: str) -> None:
        """A removed job's reports are gone from the store: stop counting them."""
        with self._lock:
            self._open = {fid: labels for fid, labels in self._open.items() if labels[0] != job}
            self._rank_hosts.pop(job, None)

    def _host(self, report: FaultReport) -> str:
        top = report.top
        if top is None:
            return ""
        rank = top.rank if top.rank is not None else None
        hosts = self._rank_hosts.get(report.job, {})
        if top.type == "rank" and rank is not None and rank not in hosts:
            try:
                hosts = {r.rank: r.host for r in self._store.ranks(report.job)}
            except Exception as exc:   # the store is down: the gauge says "" for now
                log.debug("ranks of %s unavailable for the fault gauge: %s", report.job, exc)
            self._rank_hosts[report.job] = hosts
        found = host_of_suspect(top, hosts)
        return found[0] if found else ""

    def total(self) -> int:
        with self._lock:
            return len(self._open)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts = Counter(self._open.values())
        yield GaugeMetricFamily("c4_daemon_open_faults", "Fault reports not yet resolved.",
                                value=sum(counts.values()))
        family = GaugeMetricFamily(
            "c4_open_faults", "Open fault reports by job, kind and the host of the most likely "
            "suspect (\"\": on no host, e.g. a switch).", labels=["job", "kind", "host"])
        for labels, n in sorted(counts.items()):
            family.add_metric(list(labels), n)
        yield family
