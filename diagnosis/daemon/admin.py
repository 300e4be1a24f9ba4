"""Removing jobs: on request (``c4 jobs rm``, the Admin service) and by age (the retention).

A job is removed everywhere at once, in this order: the door forgets it (its further records
are refused: NOT_FOUND, until a rank of it registers again), whatever it had accepted before is
stored, then the store removes every attempt and the job's fault reports, and the live view
drops it. The retention removes the jobs not written to for ``retention_s`` and forgets the
requests stored before then, so that the store's memory of them (to recognise resends) stays
bounded; the door refuses records older than the retention, so a resend that old is never
stored twice."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc

from c4.proto import c4_pb2, c4_pb2_grpc
from diagnosis.daemon.jobs import JobBook
from diagnosis.daemon.live import LiveView
from diagnosis.daemon.writer import Writer
from diagnosis.errors import StoreError
from diagnosis.store import RemovedJob, Store

log = logging.getLogger(__name__)

# How long a removal waits for the job's accepted requests to be stored first.
SYNC_S = 30.0


class JobRemover:
    def __init__(self, store: Store, book: JobBook, live: LiveView, writer: Writer, *,
                 on_removed: Callable[[str], None] | None = None) -> None:
        self._store = store
        self._on_removed = on_removed   # the job's other traces (its metrics) go too
        self._book = book
        self._live = live
        self._writer = writer
        self._lock = threading.Lock()   # one removal at a time
        self.removed = 0

    def remove(self, job: str) -> RemovedJob:
        """Remove ``job`` (raises StoreError when the store cannot)."""
        with self._lock:
            self._book.remove(job)
            if not self._writer.sync(SYNC_S):
                log.warning("removing job %s while requests wait for the store; rows stored "
                            "after the removal stay until the retention takes them", job)
            removed = self._store.remove_job(job)
            self._live.remove(job)
            if self._on_removed is not None:
                self._on_removed(job)
            if removed.attempts:
                self.removed += 1
                log.info("job %s removed: %d attempts, %d fault reports", job,
                         removed.attempts, removed.faults)
            return removed


class Retention:
    """Every ``every_s``, removes the jobs silent for ``retention_s`` and forgets the requests
    stored before then."""

    def __init__(self, store: Store, remover: JobRemover, retention_s: float, *,
                 every_s: float | None = None, clock: Callable[[], int] = time.time_ns) -> None:
        self._store = store
        self._remover = remover
        self.retention_s = retention_s
        # often enough that nothing outlives the retention by more than a twentieth of it
        self.every_s = every_s if every_s is not None else min(3600.0, max(60.0,
                                                                          retention_s / 20))
        self._clock = clock
        self.jobs_removed = 0
        self.requests_forgotten = 0
        self.sweeps = 0
        self._thread: threading.Thread | None = None

    def sweep(self) -> tuple[list[str], int]:
        """One pass; returns the jobs removed and the requests forgotten."""
        cutoff = self._clock() - int(self.retention_s * 1e9)
        old = sorted(job for job, seen in self._store.job_seen().items() if seen < cutoff)
        for job in old:
            self._remover.remove(job)
        forgotten = self._store.forget_applied(cutoff)
        self.jobs_removed += len(old)
        self.requests_forgotten += forgotten
        self.sweeps += 1
        if old or forgotten:
            log.info("retention (%.0f days): removed %d jobs silent since then, forgot %d "
                     "requests stored before", self.retention_s / 86400, len(old), forgotten)
        return old, forgotten

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._run, args=(stop,), name="c4-retention",
                                        daemon=True)
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            try:
                self.sweep()
            except StoreError as exc:
                log.warning("retention sweep skipped, the store is unavailable: %s", exc)
            except Exception:
                log.exception("retention sweep failed")


class AdminService(c4_pb2_grpc.AdminServicer):
    def __init__(self, remover: JobRemover) -> None:
        self._remover = remover

    def RemoveJob(self, request: c4_pb2.RemoveJobRequest, context: grpc.ServicerContext
                  ) -> c4_pb2.RemoveJobResponse:
        if not request.job:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name the job to remove")
        try:
            removed = self._remover.remove(request.job)
        except StoreError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"job {request.job!r} could not be removed: {exc}; retry once the "
                          "store is back")
        return c4_pb2.RemoveJobResponse(job=removed.job, attempts=removed.attempts,
                                        faults=removed.faults)
