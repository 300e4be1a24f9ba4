"""The iteration of communicators' calls, learnt from their kept calls.

A training job repeats the same calls every iteration, and its communicators wait at the same
points of each: a pipeline stage for the stages before and after it, every stage at the data-
parallel all-reduce that ends the iteration. A span between two kept calls that holds such a
wait takes many times the group's usual time per call, and the waits fall at the same sequence
numbers modulo the number of calls per iteration. So the period is the number of calls that
brings the spans holding waits onto each other, the most of them at one point: the wait that
every group of the size shares, at the same calls (the data-parallel all-reduce; the waits of
the pipeline fall at other calls for each stage), which is where one iteration ends and the next
begins. Nothing about the job is assumed but that it repeats: a job whose spans hold no
recurring wait has no cycle, and is cut into time buckets instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# a span holds a wait when its time per call is this many times the group's median
_WAIT = 4.0
# iterations the learning data must hold at least, for a period to be believed: more than
# 1 / _PEAK, so that one wait every group has at once (a checkpoint, a pause of the whole
# job) is no point where waits recur
_LEAST_ITERATIONS = 5
# the share of the iterations seen, over the groups, whose waits must fall on a point for it to
# be a point where they recur (at a wrong period, a few hundredths fall on any one point; a
# span longer than the spans kept hides many waits)
_PEAK = 0.25
# the share of the spans holding a wait that the period must explain (a span longer than the
# spans kept hides a wait in some iterations; some waits do not recur)
_LEAST_SCORE = 0.5
# periods explaining this share of what the best explains are as good
_AS_GOOD = 0.9
# the most groups looked at: their waits fall at the same calls
_MAX_GROUPS = 64


@dataclass(frozen=True)
class Cycle:
    """``period`` calls per iteration; an iteration's first call has seq ``phase`` modulo it;
    ``per_bucket`` iterations are judged together (a short iteration holds too few kept
    calls)."""
    period: int
    phase: int
    per_bucket: int = 1

    def bucket(self, seq: np.ndarray) -> np.ndarray:
        """The bucket of whole iterations each call is in."""
        return (np.asarray(seq) - self.phase) // (self.period * self.per_bucket)


def _coverage(s1: np.ndarray, s2: np.ndarray, period: int) -> np.ndarray:
    """Per call position modulo ``period``, how many spans ``(s1, s2]`` (each shorter than the
    period) hold it."""
    a = (s1 + 1) % period
    end = a + (s2 - s1)
    wrap = end > period
    diff = np.bincount(a, minlength=period + 1)[: period + 1].astype(np.int64)
    diff -= np.bincount(np.where(wrap, period, end), minlength=period + 1)[: period + 1]
    diff[0] += int(wrap.sum())
    diff -= np.bincount(end[wrap] - period, minlength=period + 1)[: period + 1]
    return np.cumsum(diff)[:period]


def learn_cycle(group: np.ndarray, s1: np.ndarray, s2: np.ndarray, dt: np.ndarray
                ) -> Cycle | None:
    """The cycle of a set of communicators (of one size: the same calls) from their spans
    between kept calls (``group``, the spans' first and last seq, their time), or None when
    their waits do not recur at the same calls."""
    calls = s2 - s1
    ok = calls > 0
    group, s1, s2, dt, calls = group[ok], s1[ok], s2[ok], dt[ok], calls[ok]
    if not len(group):
        return None
    chosen = np.unique(group)[:_MAX_GROUPS]
    keep = np.isin(group, chosen)
    group, s1, s2, dt, calls = group[keep], s1[keep], s2[keep], dt[keep], calls[keep]
    per_call = dt / calls
    _, inv = np.unique(group, return_inverse=True)
    median = np.array([np.median(per_call[inv == i]) for i in range(inv.max() + 1)])
    wait = per_call > _WAIT * median[inv]
    # the calls each group that waits again and again was seen over (one that never does, a
    # pipeline's slowest stage, has no point of its own), and the longest span that may mark
    # a wait
    waiting = np.flatnonzero(np.bincount(inv[wait], minlength=len(median))
                             >= _LEAST_ITERATIONS)
    seen = sum(int(s2[inv == i].max() - s1[inv == i].min()) for i in waiting.tolist())
    longest = int(calls[wait].max()) if wait.any() else 0
    most = seen // max(len(waiting), 1) // _LEAST_ITERATIONS
    lo = max(2, longest + 1)      # (the spans that mark a wait are shorter)
    if not wait.any() or most < lo:
        return None
    w1, w2 = s1[wait], s2[wait]
    periods = np.arange(lo, most + 1)
    best = np.zeros(len(periods))
    explained = np.zeros(len(periods))
    for i, p in enumerate(periods.tolist()):
        cov = _coverage(w1, w2, p)
        best[i] = cov.max()
        # the points where the waits of a good share of the iterations seen fall (of a few at
        # least): a wait recurring at them is explained by the period (at a wrong one, few
        # fall together)
        peak = np.r_[0, np.cumsum(np.tile(cov >= max(_PEAK * seen / p, _LEAST_ITERATIONS), 2))]
        a = (w1 + 1) % p
        explained[i] = float(np.mean(peak[a + (w2 - w1)] > peak[a]))
    if explained.max() < _LEAST_SCORE:
        return None
    # the shortest that explains as many: twice the period does too; half of it only where
    # every group waits at the middle of its iterations as well, which cuts none of them
    # across two iterations
    first = int(np.flatnonzero(explained >= _AS_GOOD * explained.max())[0])
    # the exact period among its neighbours: the waits of many iterations fall on one point
    # only there (one call off moves the last iteration's by as many calls as iterations seen)
    near = slice(max(first - longest, 0), min(first + longest + 1, len(periods)))
    top = best[near].max()
    ties = np.flatnonzero(best[near] == top) + near.start
    period = int(periods[ties[len(ties) // 2]])
    cov = _coverage(w1, w2, period)
    # the point in the middle of the best run (the calls every wait's span holds)
    at = np.flatnonzero(cov == cov.max())
    run = at[: int(np.argmax(np.diff(np.r_[at, at[-1] + 2]) > 1)) + 1]
    return Cycle(period, int(run[len(run) // 2]))
