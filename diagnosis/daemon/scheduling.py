"""Putting the records budget's decisions into effect: a job's schedule to its engine, its
store and its sidecars' streams; and the governor that lowers every budget while the daemon
falls behind."""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from c4.proto import c4_pb2
from diagnosis.daemon.budget import Decision, JobBudget
from diagnosis.daemon.control import ControlHub
from diagnosis.store import BatchRows, Store, Write

if TYPE_CHECKING:
    from diagnosis.engine import Engine

log = logging.getLogger(__name__)

LAG_TARGET_S = 5.0       # the delay the governor holds the daemon's queues to
MEASURE_S = 10.0         # the span over which the daemon's throughput is measured
CUT_EVERY_S = 15.0       # a job's budget takes a decision at most this often (``hold_s``)
RAISE_EVERY_S = 60.0
HEADROOM = 0.7           # of the measured capacity, what the jobs may fill
OVER = 0.9               # the jobs sending more than this of it: cut
DRAIN_S = 20.0           # a queue that built up is worked off within about this long
MIN_SCALE = 1 / 64


@dataclass(frozen=True)
class Load:
    """What the daemon faces, read once per pass of the detectors."""
    applied: int      # records applied to the detectors so far (a counter)
    apply_s: float    # seconds spent applying them so far
    analysis_s: float  # seconds spent in the detectors' passes so far
    queued: int       # records received and not yet applied (the writer's and the detectors')
    demand: float     # records/s the live jobs send at their current schedules
    budgets: float    # records/s the live jobs may send at most (their budgets together)
    stored: int = 0   # rows the store committed so far (a counter)
    store_s: float = 0.0  # seconds its commits took so far


class Governor:
    """How much of every job's budget the daemon can follow. The budget flag is what a job
    may send at most; a daemon on a busy or small machine follows less.

    The daemon's capacity is the lesser of two stages', measured over ``MEASURE_S``: the
    detectors' (the records they apply per second of applying, times the share of their thread
    the passes leave: a large job's passes take much of it) and the store's (the rows it
    commits per second of committing: SQLite on a busy machine took ~100k op rows/s, and a
    1,024-rank job at K = 4 sent as much, so every acknowledgement waited seconds on the
    writer while the detectors were idle). When the jobs send more than ``OVER`` of it, or more than
    ``2 * LAG_TARGET_S`` of its work waits, they are allowed at once only what fills
    ``HEADROOM`` of it, less what works the queue off within ``DRAIN_S``; every budget gets
    the same share. Halving every budget every 30 s instead took minutes to get there, then
    doubled back past it: the queues swung between empty and 50 s (a 16,384-rank job on two
    cores). After ``RAISE_EVERY_S`` in which the jobs sent under ``HEADROOM`` of it and less
    than ``LAG_TARGET_S / 2`` of work waited, the allowance goes back up to ``HEADROOM`` of
    the capacity, or by half if that is more (the capacity may have grown: a job left).
    Windowed records come in bursts (every node closes a window on the same boundary): the
    rules look at rates and at long queues, not at the moment's queue.

    ``room`` is what the jobs may grow into (a lower K, shorter windows): ``HEADROOM`` of the
    capacity, so that a budget larger than the daemon can follow does not step a job down
    into an overload the governor must then cut."""

    def __init__(self) -> None:
        self.capacity: float | None = None     # records/s
        self.bound_by = ""                     # the stage that sets it: "detectors", "store"
        self.allowed: float | None = None      # records/s for every job together; None: all
        self._seen: deque[tuple[float, Load]] = deque()
        self._changed_at = -RAISE_EVERY_S
        self._calm_since: float | None = None

    def govern(self, now: float, load: Load) -> float:
        """The share of its budget every job may send now."""
        self._measure(now, load)
        if self.allowed is None or load.budgets <= 0:
            return 1.0
        return min(1.0, max(MIN_SCALE, self.allowed / load.budgets))

    def room(self, budgets: float) -> float:
        """The share of their budgets the jobs may grow into (1: all, or not measured)."""
        if self.capacity is None or budgets <= 0:
            return 1.0
        return min(1.0, max(MIN_SCALE, HEADROOM * self.capacity / budgets))

    def _measure(self, now: float, load: Load) -> None:
        seen = self._seen
        seen.append((now, load))
        while len(seen) > 2 and now - seen[1][0] >= MEASURE_S:
            seen.popleft()
        t0, old = seen[0]
        applying = load.apply_s - old.apply_s
        if now - t0 < MEASURE_S / 2 or applying <= 0 or load.applied - old.applied < 1000:
            return                              # not measured yet, or nothing to measure by
        free = max(0.1, 1.0 - (load.analysis_s - old.analysis_s) / (now - t0))
        cap = (load.applied - old.applied) / applying * free
        self.bound_by = "detectors"
        committing, rows = load.store_s - old.store_s, load.stored - old.stored
        if committing > 0 and rows >= 1000 and rows / committing < cap:
            # a writer that idles between commits measures at least what it would take; one
            # that commits all the time measures what it takes
            cap, self.bound_by = rows / committing, "store"
        self.capacity = cap
        demand = load.demand
        delay = load.queued / cap
        calm = demand < HEADROOM * cap and delay < LAG_TARGET_S / 2
        self._calm_since = (self._calm_since or now) if calm else None
        if (demand > OVER * cap or delay > 2 * LAG_TARGET_S) \
                and now - self._changed_at >= CUT_EVERY_S:
            allowed = max(HEADROOM * cap - load.queued / DRAIN_S, 0.1 * cap)
            if self.allowed is not None and allowed >= self.allowed:
                return                          # already cut: wait for it to reach the jobs
            self.allowed, self._changed_at = allowed, now
            log.warning("the daemon follows %.0f records/s (its %s) and %.1f s of its work "
                        "waits, with %.0f/s sent: the jobs may send %.0f/s together (give the "
                        "daemon more CPU%s, or lower --job-records-per-s)", cap, self.bound_by,
                        delay, demand, allowed,
                        " or a faster store" if self.bound_by == "store" else "")
        elif self.allowed is not None and self._calm_since is not None \
                and now - max(self._calm_since, self._changed_at) >= RAISE_EVERY_S:
            self.allowed = max(HEADROOM * cap, 1.5 * self.allowed)
            self._changed_at = now
            if self.allowed >= load.budgets:
                self.allowed = None
            log.info("the daemon keeps up (%.0f of %.0f records/s): the jobs may send %s",
                     demand, cap, "their whole budgets" if self.allowed is None
                     else f"{self.allowed:,.0f}/s together")


class Schedules:
    """Enacts decisions: the engine, the store (a restarted daemon keeps the schedule), every
    stream that carries the job."""

    def __init__(self, store: Store | None, control: ControlHub | None) -> None:
        self._store = store
        self._control = control
        self._writer_id = f"c4-daemon-{time.time_ns()}"   # (sidecar, seq) of its own writes
        self._writes = 0
        self.decisions: list[tuple[str, int, Decision]] = []   # recent, for tests

    def enact(self, job: str, attempt: int, engine: Engine, d: Decision, now_ns: int) -> bool:
        """Put a decision into effect; returns whether the job now ships reduced telemetry."""
        msg = c4_pb2.SampleSchedule(
            job=job, attempt=attempt, version=d.version, window_ns=d.window_ns,
            window_from_ns=d.window_from_ns, default_sample=d.default,
            steps=[c4_pb2.SampleStep(pg=pg, from_seq=s, sample=k)
                   for pg, steps in sorted(d.steps.items()) for s, k in steps])
        engine.set_schedule(d.default, d.steps)
        engine.set_window(d.window_ns)
        if self._store is not None:
            self._writes += 1
            try:
                self._store.write([Write(self._writer_id, self._writes, BatchRows(
                    job, attempt, "schedule", len(msg.steps), now_ns, now_ns,
                    msg.SerializeToString()))])
            except Exception as exc:
                log.warning("cannot store the sampling schedule of job %s: %s", job, exc)
        sent = self._control.publish(msg) if self._control is not None else 0
        self.decisions = [*self.decisions[-63:], (job, attempt, d)]
        log.info("job %s: sampling factor %d, windows %s (%s); sent to %d sidecars", job,
                 d.sample, f"{d.window_ns / 1e9:g} s" if d.window_ns else "default", d.why,
                 sent)
        return d.sample > 1 or d.default > 1

    def restore(self, job: str, attempt: int, budget: JobBudget, engine: Engine) -> bool | None:
        """The stored schedule of a job known from before a daemon restart, back in its budget,
        engine and streams; returns whether it is reduced (None: none stored)."""
        if self._store is None:
            return None
        try:
            stored = self._store.batches(job, attempt, kinds=["schedule"])
        except Exception as exc:
            log.warning("cannot reload the sampling schedule of job %s: %s", job, exc)
            return None
        if not stored:
            return None
        msg = c4_pb2.SampleSchedule.FromString(stored[-1].payload)
        steps: dict[str, list[tuple[int, int]]] = {}
        for step in msg.steps:
            steps.setdefault(step.pg, []).append((int(step.from_seq), int(step.sample)))
        default = max(1, int(msg.default_sample))
        sample = max([default, *(k for v in steps.values() for _, k in v)])
        budget.restore(msg.version, sample, msg.window_ns, steps, default)
        engine.set_schedule(default, steps)
        engine.set_window(msg.window_ns)
        if self._control is not None:
            self._control.publish(msg)
        return sample > 1
