"""Filing fault reports: store them, number them, and fan them out to live watchers."""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable

from diagnosis.report import FaultReport
from diagnosis.store import Store

log = logging.getLogger(__name__)


class FaultHub:
    """Files or updates reports and publishes every change to subscribers (``Faults.Watch``)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._subscribers: list[queue.Queue[FaultReport | None]] = []
        # called with every stored report (in the filing thread; must return quickly)
        self.listeners: list[Callable[[FaultReport], None]] = []

    @staticmethod
    def report_id(job: str, key: str) -> str:
        """A stable id for a detector's fault key within a job, short enough to type."""
        return hashlib.sha1(f"{job}\0{key}".encode()).hexdigest()[:12]

    def file(self, job: str, report: FaultReport) -> FaultReport:
        """Store a new report, or update the open one with the same detector key."""
        key = report.id or f"{report.kind}:{report.top.id if report.top else ''}"
        fid = self.report_id(job, key)
        with self._lock:
            previous = self._store.get_fault(fid)
            revision = previous.revision + 1 if previous else 1
            first = min(previous.first_seen_ns, report.first_seen_ns) if previous else \
                report.first_seen_ns
            stored = report.with_updates(
                id=fid, job=job, revision=revision, first_seen_ns=first,
                last_seen_ns=max(report.last_seen_ns, report.first_seen_ns))
            self._store.put_fault(stored)
            subscribers = list(self._subscribers)
        log.info("fault %s rev %d (%s): %s", fid, revision, stored.kind, stored.summary)
        for q in subscribers:
            q.put(stored)
        for listener in list(self.listeners):
            try:
                listener(stored)
            except Exception:
                log.exception("a listener of filed reports failed")
        return stored

    def subscribe(self) -> queue.Queue[FaultReport | None]:
        q: queue.Queue[FaultReport | None] = queue.Queue()
        with self._lock:
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue[FaultReport | None]) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    def close(self) -> None:
        with self._lock:
            for q in self._subscribers:
                q.put(None)
            self._subscribers.clear()
