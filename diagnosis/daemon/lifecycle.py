"""A job's life as the daemon sees it (running, silent, finished, failed) and what its end
means for its faults: when every rank of an attempt has said it is exiting, the attempt has
ended, and its open reports resolve with that reason (a stale report must not lead a
recovery started later to act on a job that is gone).

A job whose processes were killed (SIGKILL, the out-of-memory killer, a lost node) says no last
words: it only goes quiet. A job that is merely hung still speaks (its collectors' stats frames
go on), so a job heard from no more for the daemon's ``--job-gone-after`` has failed, its end
dated to when it was last heard."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from diagnosis.daemon.faults import FaultHub
from diagnosis.store import Store

log = logging.getLogger(__name__)

#: Kinds that, open when a job's ranks exit, say the job failed rather than finished.
FAILING_KINDS = ("noncomm_hang", "comm_hang", "error")
RUNNING, SILENT, FINISHED, FAILED, UNKNOWN = "running", "silent", "finished", "failed", "unknown"
#: Heard from within this long: running; longer: silent (a hung job is silent, not ended).
SILENT_AFTER_S = 60.0


@dataclass(frozen=True)
class JobEnd:
    job: str
    attempt: int
    state: str          # FINISHED or FAILED
    ended_ns: int
    reason: str
    silent: bool = False   # ended by going silent without last words (see the module)


class JobLifecycle:
    """Records the ends of jobs' attempts and resolves their faults."""

    def __init__(self, hub: FaultHub, store: Store) -> None:
        self._hub = hub
        self._store = store
        self._lock = threading.Lock()
        self._ends: dict[str, JobEnd] = {}        # job -> end of its latest ended attempt

    def ended(self, job: str, attempt: int, ended_ns: int | None = None,
              silent_s: float | None = None) -> JobEnd:
        """Every rank of ``job``'s ``attempt`` said it is exiting, or (``silent_s``) none did
        and it has been silent that long since ``ended_ns``: record the end and resolve the
        job's open reports."""
        ended_ns = ended_ns or time.time_ns()
        open_reports = self._store.list_faults(job, open_only=True)
        failing = [r for r in open_reports if r.kind in FAILING_KINDS]
        if silent_s is not None:
            end = JobEnd(job, attempt, FAILED, ended_ns,
                         f"no rank said it was exiting and nothing heard for {silent_s:.0f} s: "
                         "its processes were killed (SIGKILL, out of memory) or their nodes "
                         "lost", silent=True)
        elif failing:
            kinds = sorted({r.kind for r in failing})
            end = JobEnd(job, attempt, FAILED, ended_ns,
                         f"every rank exited with {len(failing)} open "
                         f"{'/'.join(kinds)} report(s)")
        else:
            end = JobEnd(job, attempt, FINISHED, ended_ns, "every rank exited")
        with self._lock:
            self._ends[job] = end
        for r in open_reports:
            # a report runs no longer than its job did
            self._hub.resolve(r.id, f"job {job} {end.state} (attempt {attempt}): {end.reason}",
                              by="c4", now_ns=ended_ns, until_ns=ended_ns)
        log.info("job %s attempt %d %s: %s; %d open report(s) resolved", job, attempt,
                 end.state, end.reason, len(open_reports))
        return end

    def started(self, job: str, attempt: int) -> None:
        """A new attempt speaks, or one taken for gone speaks again: the job runs again."""
        with self._lock:
            end = self._ends.get(job)
            if end is not None and (attempt > end.attempt or end.silent):
                del self._ends[job]

    def state(self, job: str, heard_s_ago: float | None) -> tuple[str, int, str]:
        """(state, ended_ns, reason) of a job; ``heard_s_ago`` from the live view (None: not
        in it)."""
        with self._lock:
            end = self._ends.get(job)
        if end is not None:
            return end.state, end.ended_ns, end.reason
        if heard_s_ago is None:
            return UNKNOWN, 0, ""
        if heard_s_ago > SILENT_AFTER_S:
            return SILENT, 0, f"nothing heard for {heard_s_ago:.0f} s"
        return RUNNING, 0, ""
