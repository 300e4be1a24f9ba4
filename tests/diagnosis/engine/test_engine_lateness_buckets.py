"""The time buckets that fold a group's kept calls into its lateness samples
(``SampledStragglers._bucket``, ``_Rings.add``, diagnosis/engine/straggle.py).

One tensor-parallel group of eight GPUs calling every 4 ms, one call in 16 kept: four kept calls
span 256 ms, the bucket length for its pace. Its first kept calls come before the group's pace
is known (no progress window has closed yet): that is bench.accuracy.hard's
``int-slow_gpu-512-0`` at K = 16 in stream mode, whose GPU (3.9x slow one iteration in two) sat
in one of six groups that kept the 1 s guess for the whole run and was reported 7 s after its
onset, against 1 s on the full trace."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.straggle import SampledStragglers
from diagnosis.engine.timing import GroupTiming

MS = 1_000_000
T0 = 10_000_000_000
N = 8
K = 16
PACE_NS = 4 * MS
KEPT_NS = K * PACE_NS
SLOW = 5


class Detector:
    """The detector with the group's pace unknown until ``know()``."""

    def __init__(self, pace_ns: int = PACE_NS) -> None:
        self.arena = Arena(4)
        self.group = self.arena.add_group(0, "tp.0", np.arange(N))
        cfg = EngineConfig()
        timing = GroupTiming(self.arena, cfg)
        self.pace_ns, self.pace = pace_ns, float("nan")
        timing.pace = lambda groups, min_periods=1: np.full(len(groups), self.pace)
        timing.median_period = lambda groups: np.full(len(groups), np.nan)
        self.st = SampledStragglers(self.arena, timing, cfg)
        self.st.sample = K
        self.rng = np.random.default_rng(3)
        self.now = T0

    def know(self) -> None:
        self.pace = float(self.pace_ns)

    def feed(self, seconds: float, late_ms: float = 0.0) -> None:
        """``seconds`` of kept calls, 100 ms at a time; member ``SLOW`` late by ``late_ms``."""
        kept = K * self.pace_ns
        for _ in range(int(seconds * 10)):
            lo, self.now = self.now, self.now + 100 * MS
            calls = np.arange(-(-(lo - T0) // kept), -(-(self.now - T0) // kept))
            if not len(calls):
                continue
            enter = T0 + calls[:, None] * kept + self.rng.normal(0, 0.02 * MS, (len(calls), N))
            enter[:, SLOW] += late_ms * MS
            enter = enter.astype(np.int64)
            seq = calls * K
            self.st.update(Finished(seq, np.full(len(calls), self.group), seq, enter, enter + MS,
                                    np.full_like(enter, -1), np.zeros(enter.shape, np.int8)))

    def bucket_ns(self) -> int:
        ring = self.st.rings[N]
        return int(ring.bucket[ring.local[self.group]])

    def samples(self) -> int:
        ring = self.st.rings[N]
        return int(ring.pos[ring.local[self.group]])


def test_a_group_first_seen_before_its_pace_was_known_gets_the_bucket_of_its_pace_once_it_is():
    d = Detector()
    d.feed(1.0)
    assert d.bucket_ns() == EngineConfig().straggle_bucket_ns     # the guess
    d.know()
    d.feed(1.0)
    assert d.bucket_ns() == 4 * KEPT_NS


def test_a_gpu_slow_in_such_a_group_is_found_within_two_seconds():
    """Six samples since its onset at 256 ms buckets; at the guessed 1 s, two."""
    d = Detector()
    d.feed(1.0)
    d.know()
    d.feed(8.0)
    assert d.st.judge() == []
    d.feed(2.0, late_ms=2.0)
    assert [f.rank for f in d.st.judge()] == [SLOW]


def test_calls_after_a_longer_bucket_is_chosen_are_not_dropped():
    """A group calling every 40 ms: four kept calls span 2.56 s, so its bucket grows from the
    1 s guess to 2 s. The bucket being filled at the change becomes the one of its first call;
    kept by its old index, every later call would fall in an earlier bucket, a straggler of
    one already written, and be dropped."""
    d = Detector(pace_ns=40 * MS)
    d.feed(1.5)
    d.know()
    before = d.samples()
    d.feed(10.0)
    assert d.bucket_ns() == 2 * EngineConfig().straggle_bucket_ns
    assert d.samples() - before >= 4
