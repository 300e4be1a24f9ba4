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
SATURATED_S = 3.0        # its capacity: its throughput over at least this long saturated
CUT_EVERY_S = 15.0       # a job's budget takes a decision at most this often (``hold_s``)
RAISE_EVERY_S = 60.0
HEADROOM = 0.7           # of the measured capacity, what the jobs may fill
DRAIN_S = 20.0           # a queue that built up is worked off within about this long
MIN_SCALE = 1 / 64


@dataclass(frozen=True)
class Load:
    """What the daemon faces, read once per pass of the detectors."""
    applied: int      # records applied to the detectors so far (a counter)
    queued: int       # records received and not yet applied (the writer's and the detectors')
    demand: float     # records/s the live jobs send at their current schedules


class Governor:
    """The share of every job's budget the daemon can follow. The budget flag is what a job
    may send at most; a daemon on a busy or small machine follows less.

    The daemon's capacity is the rate at which it applies records while its queues are not
    empty (it could do no more). When it is saturated and falls behind (its queues hold more
    than half of ``LAG_TARGET_S`` of its work, or the jobs send more than it can do), every
    budget is cut at once to what fills ``HEADROOM`` of that capacity, less what works the
    queue off within ``DRAIN_S``: halving every 30 s instead took minutes to get there, then
    doubled back past it, and the queues swung between empty and 50 s (a 16,384-rank job on
    two cores). It is raised again, by at most half, only while the jobs use less than
    ``HEADROOM`` of the capacity and nothing waits."""

    def __init__(self) -> None:
        self.scale = 1.0
        self.capacity: float | None = None     # records/s, measured while saturated
        self._seen: deque[tuple[float, int]] = deque()
        self._cut_at = self._raised_at = -RAISE_EVERY_S
        self._saturated_at: tuple[float, int] | None = None

    def govern(self, now: float, load: Load) -> float:
        seen = self._seen
        seen.append((now, load.applied))
        while len(seen) > 2 and now - seen[1][0] >= MEASURE_S:
            seen.popleft()
        t0, a0 = seen[0]
        if now - t0 < MEASURE_S / 2:
            return self.scale                   # not measured yet
        done = (load.applied - a0) / (now - t0)
        saturated = load.queued > done          # more than a second of work waits
        if not saturated:
            self._saturated_at = None
            if self.capacity is not None:
                self.capacity = max(self.capacity, done)
        else:
            if self._saturated_at is None:
                self._saturated_at = seen[-2] if len(seen) > 1 else seen[-1]
            # the rate since it has been saturated only: it could do no more then
            ts, sa = self._saturated_at
            if now - ts >= SATURATED_S:
                self.capacity = (load.applied - sa) / (now - ts)
        if not self.capacity:
            return self.scale
        cap = self.capacity
        demand = load.demand if load.demand > 0 else done
        delay = load.queued / cap
        if saturated and (delay > LAG_TARGET_S / 2 or demand > cap) \
                and now - self._cut_at >= CUT_EVERY_S and self.scale > MIN_SCALE:
            want = max(HEADROOM * cap - load.queued / DRAIN_S, 0.1 * cap)
            self.scale = max(MIN_SCALE, self.scale * min(want / demand, 0.8))
            self._cut_at = now
            log.warning("the daemon follows %.0f records/s and is %.1f s behind with %.0f/s "
                        "sent: every job's budget down to %.1f%% (give the daemon more CPU "
                        "or lower --job-records-per-s)", cap, delay, demand, 100 * self.scale)
        elif not saturated and delay < 1.0 and demand < 0.6 * cap and self.scale < 1.0 \
                and now - max(self._cut_at, self._raised_at) >= RAISE_EVERY_S:
            self.scale = min(1.0, self.scale * min(1.5, HEADROOM * cap / max(demand, 1.0)))
            self._raised_at = now
            log.info("the daemon keeps up (%.0f of %.0f records/s): budgets at %.1f%%",
                     demand, cap, 100 * self.scale)
        return self.scale


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
        if self._control is not None:
            self._control.publish(msg)
        return sample > 1
