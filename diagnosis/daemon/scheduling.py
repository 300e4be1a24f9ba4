"""Putting the records budget's decisions into effect: a job's schedule to its engine, its
store and its sidecars' streams; and the governor that lowers every budget while the daemon
falls behind."""

from __future__ import annotations

import logging
import time
from typing import Any

from c4.proto import c4_pb2
from diagnosis.daemon.budget import Decision, JobBudget
from diagnosis.daemon.control import ControlHub
from diagnosis.store import BatchRows, Store, Write

log = logging.getLogger(__name__)

LAG_TARGET_S = 5.0       # the detectors' lag the governor holds budgets to
GOVERN_EVERY_S = 30.0
MIN_SCALE = 1 / 16


class Governor:
    """The share of every job's budget the daemon can follow: halved while it falls behind
    (stored records pile up for the detectors: the backlog past half its bound, or the
    detectors more than ``2 * LAG_TARGET_S`` behind), at most once per ``GOVERN_EVERY_S``
    since a lower factor reaches them only after the backlog; doubled back once the backlog is
    small and the lag under ``LAG_TARGET_S``. The lag alone is no signal: a large job's
    analysis pass takes seconds whatever it is sent. The budget flag is what a job may send at
    most; a daemon on a busy or small machine takes less."""

    def __init__(self) -> None:
        self.scale = 1.0
        self._at = -GOVERN_EVERY_S

    def govern(self, now: float, lag_s: float, backlog: float) -> float:
        """``backlog``: the share of the detectors' backlog bound in use."""
        if now - self._at < GOVERN_EVERY_S:
            return self.scale
        behind = backlog > 0.5 or lag_s > 2 * LAG_TARGET_S
        if behind and self.scale > MIN_SCALE:
            self.scale = max(MIN_SCALE, self.scale / 2)
            self._at = now
            log.warning("the detectors are %.1f s behind (backlog %.0f%%): every job's budget "
                        "down to %.0f%% (give the daemon more CPU or lower "
                        "--job-records-per-s)", lag_s, 100 * backlog, 100 * self.scale)
        elif not behind and backlog < 0.1 and lag_s < LAG_TARGET_S and self.scale < 1.0:
            self.scale = min(1.0, self.scale * 2)
            self._at = now
            log.info("the detectors keep up again: budgets at %.0f%%", 100 * self.scale)
        return self.scale


def engine_schedule(engine: Any, default: int, steps: dict[str, list[tuple[int, int]]]
                    ) -> None:
    """Tell the engine a job's schedule: its default factor, then every step."""
    if engine is None:
        return
    engine.set_sample(default)          # (clears the engine's per-communicator steps)
    for pg, v in steps.items():
        for from_seq, k in v:
            engine.set_sample(k, pg, from_seq)


class Schedules:
    """Enacts decisions: the engine, the store (a restarted daemon keeps the schedule), every
    stream that carries the job."""

    def __init__(self, store: Store | None, control: ControlHub | None) -> None:
        self._store = store
        self._control = control
        self._writer_id = f"c4-daemon-{time.time_ns()}"   # (sidecar, seq) of its own writes
        self._writes = 0
        self.decisions: list[tuple[str, int, Decision]] = []   # recent, for tests

    def enact(self, job: str, attempt: int, engine: Any, d: Decision, now_ns: int) -> bool:
        """Put a decision into effect; returns whether the job now ships reduced telemetry."""
        msg = c4_pb2.SampleSchedule(
            job=job, attempt=attempt, version=d.version, window_ns=d.window_ns,
            window_from_ns=d.window_from_ns, default_sample=d.default,
            steps=[c4_pb2.SampleStep(pg=pg, from_seq=s, sample=k)
                   for pg, steps in sorted(d.steps.items()) for s, k in steps])
        engine_schedule(engine, d.default, d.steps)
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

    def restore(self, job: str, attempt: int, budget: JobBudget, engine: Any) -> bool | None:
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
        engine_schedule(engine, default, steps)
        if self._control is not None:
            self._control.publish(msg)
        return sample > 1
