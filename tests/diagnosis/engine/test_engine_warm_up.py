"""A job's first seconds make no episodes (``straggle._WARM_NS``, through ``slow.judge_rings``'
``episodes_from_ns``).

What a 512-GPU job at one call in 64 filed (tor, 16 layers, ``comm_hang-512-3`` of
bench.accuracy.run): a GPU late by 5-10 % of its group's pace in four buckets of the job's
first 5 s, while the ranks settled and the group's pace was learnt from its first kept calls,
and never after, was reported "slow again and again".

Sixteen hosts' groups of eight GPUs at one call in 16 (buckets of 0.32 s); member 5 of the
first host late by 10 % of the pace for a third of a second now and then, over a noise of
0.4 %; 25 s of kept calls. Late so in each of the first five seconds, the code before reported
it from the pass at 3 s on."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.slow import SlowRank
from tests.support.engine_builders import feed_kept_calls, sampled_stragglers

MS = 1_000_000
T0 = 10_000_000_000
N = 8
HOSTS = 16
K = 16
PACE_NS = 5 * MS
KEPT_NS = K * PACE_NS
SLOW = 5


def _run(late_seconds: set[int], seconds: int = 25, seed: int = 3) -> list[list[SlowRank]]:
    """The findings naming the slow member strongly enough to be reported, at each pass (one
    every 2 s, as the engine judges), over ``seconds`` of kept calls, the member late at the
    first third of the kept calls (about a bucket) of the seconds ``late_seconds``."""
    st = sampled_stragglers(HOSTS, N, K, PACE_NS)
    strong = np.log(st.cfg.slow_alpha)
    rng = np.random.default_rng(seed)
    per_s = int(1e9 // KEPT_NS)
    passes = []
    for s in range(seconds):
        t = T0 + (s * per_s + np.arange(per_s)) * KEPT_NS
        enter = t[None, :, None] + rng.normal(0, 0.02 * MS, (HOSTS, per_s, N))
        if s in late_seconds:
            enter[0, : per_s // 3, SLOW] += 0.1 * PACE_NS
        feed_kept_calls(st, enter, s * per_s)
        if s % 2 == 1:
            passes.append([f for f in st.judge() if f.rank == SLOW and f.logp < strong])
    return passes


def test_a_gpu_late_now_and_then_in_the_first_seconds_only_is_not_slow_again_and_again():
    assert not any(_run({0, 1, 2, 3, 4}))


def test_a_gpu_late_one_second_in_three_after_the_first_seconds_is_slow_again_and_again():
    [f] = _run({6, 9, 12, 15, 18, 21})[-1]
    assert f.duty is not None
    assert f.onset_ns >= T0 + 5_500_000_000        # the bucket that holds second 6
