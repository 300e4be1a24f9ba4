"""Filing fault reports: store them, number them, and fan them out to live watchers."""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable

from c4.report import FaultReport
from diagnosis.store import Store

log = logging.getLogger(__name__)

#: Evidence the daemon adds to a report after the engine filed it (``FaultHub.annotate``); the
#: engine's later revisions do not know it and keep it.
ANNOTATIONS = ("processes", "ack", "resolution")


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
        """Store a new report, or update the stored one with the same detector key. Which
        incident a report belongs to, its onset and when it ends are the engine's reporter's
        (``diagnosis.engine.reporter``); here the key becomes an id within the job, and the
        stored revision also counts what the daemon and people add (``ANNOTATIONS``)."""
        key = report.id or f"{report.kind}:{report.top.id if report.top else ''}"
        fid = self.report_id(job, key)
        with self._lock:
            previous = self._store.get_fault(fid)
            revision = previous.revision + 1 if previous else 1
            first = min(previous.first_seen_ns, report.first_seen_ns) if previous else \
                report.first_seen_ns
            evidence = report.evidence
            if previous is not None:
                kept = {k: previous.evidence[k] for k in ANNOTATIONS
                        if k in previous.evidence and k not in evidence}
                evidence = {**evidence, **kept} if kept else evidence
            state = report.state
            if previous is not None and "resolution" in previous.evidence \
                    and previous.state != "open":
                # closed by a person or by its job's end: the detectors' late updates do not
                # reopen it
                state = previous.state
            stored = report.with_updates(
                id=fid, job=job, revision=revision, first_seen_ns=first, evidence=evidence,
                last_seen_ns=max(report.last_seen_ns, report.first_seen_ns), state=state)
            self._store.put_fault(stored)
        log.info("fault %s rev %d (%s): %s", fid, revision, stored.kind, stored.summary)
        self._publish(stored)
        return stored

    def annotate(self, fault_id: str, key: str, value: object) -> FaultReport | None:
        """Add the daemon's own evidence (one of ``ANNOTATIONS``) to a stored report, as a new
        revision; None if the report is not stored."""
        if key not in ANNOTATIONS:
            raise ValueError(f"evidence {key!r} is not one the daemon adds ({ANNOTATIONS})")
        with self._lock:
            previous = self._store.get_fault(fault_id)
            if previous is None:
                return None
            stored = previous.with_updates(evidence={**previous.evidence, key: value},
                                           revision=previous.revision + 1)
            self._store.put_fault(stored)
        self._publish(stored)
        return stored

    def resolve(self, fault_id: str, reason: str, *, by: str = "c4",
                now_ns: int | None = None, until_ns: int | None = None) -> FaultReport | None:
        """Resolve an open report with the reason (a person closing it, its job's end).
        ``until_ns``: when the condition ended, where its last revision ran past it (a job
        killed without last words is revised until its silence is long enough to tell)."""
        with self._lock:
            previous = self._store.get_fault(fault_id)
            if previous is None:
                return None
            if previous.state != "open":
                return previous
            resolution = {"reason": reason, "by": by, "at_ns": now_ns or time.time_ns()}
            last = previous.last_seen_ns
            if until_ns is not None and last > until_ns:
                last = max(until_ns, previous.first_seen_ns)
            stored = previous.with_updates(
                state="resolved", revision=previous.revision + 1, last_seen_ns=last,
                evidence={**previous.evidence, "resolution": resolution})
            self._store.put_fault(stored)
        log.info("fault %s resolved by %s: %s", fault_id, by, reason)
        self._publish(stored)
        return stored

    def acknowledge(self, fault_id: str, by: str, note: str = "",
                    now_ns: int | None = None) -> FaultReport | None:
        """Mark a report as taken by a person; it stays open."""
        ack = {"by": by, "note": note, "at_ns": now_ns or time.time_ns()}
        return self.annotate(fault_id, "ack", ack)

    def get(self, fault_id: str) -> FaultReport | None:
        return self._store.get_fault(fault_id)

    def _publish(self, stored: FaultReport) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for q in subscribers:
            q.put(stored)
        for listener in list(self.listeners):
            try:
                listener(stored)
            except Exception:
                log.exception("a listener of filed reports failed")

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


class ReportFollower:
    """A thread that takes each report the hub files (outside the hub's caller) and hands it
    to ``consider``; a failure on one report is logged and the next is taken."""

    def __init__(self, faults: FaultHub, name: str, enabled: bool, what: str) -> None:
        self._faults = faults
        self._enabled = enabled
        self._what = what   # for the log: "could not {what} of fault ID"
        self._queue: queue.Queue[FaultReport | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def consider(self, report: FaultReport) -> object:
        raise NotImplementedError

    def start(self) -> None:
        if self._enabled:
            self._faults.listeners.append(self._queue.put)
            self._thread.start()

    def close(self) -> None:
        if self._queue.put in self._faults.listeners:
            self._faults.listeners.remove(self._queue.put)
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            report = self._queue.get()
            if report is None:
                return
            try:
                self.consider(report)
            except Exception:
                log.exception("could not %s of fault %s", self._what, report.id)
