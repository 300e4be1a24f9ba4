"""Each recovery's timeline (fault onset, report, isolation, stop, restart, first step after
the restart), the work it lost, and a job's ETTR, computed from the journal.

Definitions:
- lost work: the training done after the checkpoint the job resumed from, which the restarted
  job repeats; from that checkpoint's save (its state) to the stop, and in steps.
- downtime: from the stop request to the first step after the restart; the script's own
  start-up (interpreter, torch, rendezvous, checkpoint load) is relaunched → loaded.
- ETTR (effective training time ratio): productive time over wall-clock time, from the job's
  first launch to its exit (or now). An attempt is productive from its first step to the
  point its successor resumed from (the whole attempt, for the last one); start-up, repeated
  work and stops are not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from recovery.journal import Event, Journal, Recovery
from recovery.states import State

PHASES = ("onset", "report", "isolated", "stopping", "stopped", "relaunched", "loaded",
          "first_step")


@dataclass(frozen=True)
class Timeline:
    recovery: Recovery
    #: phase -> wall-clock ns (missing phases are absent)
    at: dict[str, int]
    resumed_step: int | None = None
    last_step: int | None = None
    lost_steps: int | None = None
    lost_work_s: float | None = None
    downtime_s: float | None = None
    #: Seconds the restarted script spent loading the checkpoint (part of relaunched→loaded).
    load_s: float | None = None

    def seconds(self, a: str, b: str) -> float | None:
        if a in self.at and b in self.at:
            return (self.at[b] - self.at[a]) / 1e9
        return None


def timeline(journal: Journal, rec: Recovery) -> Timeline:
    at: dict[str, int] = {"onset": rec.onset_ns, "report": rec.report_ns}
    marks = {t.dst: t.t_ns for t in journal.transitions(rec.id)}
    if State.ISOLATED in marks:
        at["isolated"] = marks[State.ISOLATED]
    since = marks.get(State.ISOLATING, rec.created_ns)
    events = journal.events(rec.job)
    stopping: Event | None = None
    stopped: Event | None = None
    launched: Event | None = None
    loaded: Event | None = None
    first: Event | None = None
    for ev in events:
        if ev.t_ns < since:
            continue
        if ev.kind == "stopping" and stopping is None:
            stopping = ev
        elif ev.kind == "stopped" and stopping is not None and stopped is None:
            stopped = ev
        elif ev.kind == "launched" and stopped is not None and launched is None:
            launched = ev
        elif ev.kind == "loaded" and launched is not None and loaded is None and \
                ev.attempt == launched.attempt:
            loaded = ev
        elif ev.kind == "first_step" and launched is not None and first is None and \
                ev.attempt == launched.attempt:
            first = ev
    for name, mark in (("stopping", stopping), ("stopped", stopped), ("relaunched", launched),
                       ("loaded", loaded), ("first_step", first)):
        if mark is not None:
            at[name] = mark.t_ns
    load_s = loaded.data.get("load_s") if loaded is not None else None
    out = Timeline(rec, at, load_s=load_s)
    if stopping is None or first is None:
        return out
    resumed = first.step
    # (the checkpoint it resumed from may have been committed after the stop began: a save
    # in flight finishes during the grace before SIGKILL; the relaunch read it, so it was
    # committed before the first step of the new attempt)
    ckpt = _checkpoint_before(events, resumed, first.t_ns)
    last = stopping.step
    lost_steps = (last + 1 - resumed) if last is not None and resumed is not None else None
    lost_s = (stopping.t_ns - ckpt.data["saved_ns"]) / 1e9 if ckpt is not None else None
    return Timeline(rec, at, resumed, last, lost_steps, lost_s,
                    (first.t_ns - stopping.t_ns) / 1e9, load_s)


def _checkpoint_before(events: list[Event], step: int | None, t_ns: int) -> Event | None:
    found = [e for e in events if e.kind == "checkpoint" and e.step == step and e.t_ns <= t_ns]
    return found[-1] if found else None


@dataclass(frozen=True)
class JobEfficiency:
    job: str
    wall_s: float
    productive_s: float
    attempts: int
    running: bool

    @property
    def ettr(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0


def job_efficiency(journal: Journal, job: str, now_ns: int | None = None) -> JobEfficiency | None:
    events = journal.events(job)
    launches = [e for e in events if e.kind == "launched"]
    if not launches:
        return None
    exits = [e for e in events if e.kind == "exited"]
    running = not exits or exits[-1].t_ns < launches[-1].t_ns
    end = (now_ns or time.time_ns()) if running else exits[-1].t_ns
    productive = 0.0
    for i, launch in enumerate(launches):
        nxt = launches[i + 1] if i + 1 < len(launches) else None
        mine = [e for e in events if e.attempt == launch.attempt and e.t_ns >= launch.t_ns]
        first = next((e for e in mine if e.kind == "first_step"), None)
        if first is None:
            continue
        if nxt is None:
            kept_until = end
        else:
            # the successor resumed from a checkpoint of this attempt: work after it is lost
            succ_first = next((e for e in events if e.kind == "first_step"
                               and e.attempt == nxt.attempt), None)
            stop = next((e for e in mine if e.kind in ("stopping", "stopped")), None)
            ckpt = _checkpoint_before(mine, succ_first.step if succ_first else None,
                                      stop.t_ns if stop else end)
            kept_until = ckpt.data["saved_ns"] if ckpt is not None else first.t_ns
        productive += max(0.0, (kept_until - first.t_ns) / 1e9)
    return JobEfficiency(job, (end - launches[0].t_ns) / 1e9, productive, len(launches),
                         running)
