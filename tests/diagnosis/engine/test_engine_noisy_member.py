"""A member judged against its own past (``slow._against_own_past``, through
``slow.judge_rings`` as ``SampledStragglers.judge`` calls it).

One host's tensor-parallel group of eight GPUs, 64 buckets of sampled lateness per member
(a fraction of the group's pace). The communicator's rate of late samples is its members'
lower median, a thirtieth or less; one member may be noisier than the others all along.
A single GPU is reported once its finding reaches ``slow_alpha``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.slow import RecStats, SlowRank, judge_rings

T0 = 10_000_000_000
N = 8
K = 64
NOISY = 2


@dataclass
class Ring:
    """One group's ring, oldest sample first (``slow.Rings``)."""
    x: np.ndarray
    n: int = N
    K: int = K
    groups: list[int] = field(default_factory=lambda: [0])
    scale: np.ndarray = field(default_factory=lambda: np.full((1, K), 5e6))
    t: np.ndarray = field(default_factory=lambda: T0 + np.arange(K)[None, :] * 10**9)
    pos: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    judged: np.ndarray = field(default_factory=lambda: np.full(1, -1, dtype=np.int64))
    found: dict[int, list[SlowRank]] = field(default_factory=dict)
    rec_stats: RecStats | None = None

    @property
    def a(self) -> np.ndarray:
        return self.x


def found(x: np.ndarray) -> list[SlowRank]:
    arena = Arena(4)
    arena.add_group(0, "tp.0", np.arange(N))
    cfg = EngineConfig()
    return judge_rings([Ring(x[None].astype(np.float32))], arena, cfg,
                       cfg.straggle_min_excess, crowd=2, min_shift=cfg.straggle_min_shift)


def reported(x: np.ndarray) -> list[int]:
    """The members found strongly enough to be reported on their own."""
    strong = np.log(EngineConfig().slow_alpha)
    return [f.rank for f in found(x) if f.logp < strong]


def lateness(seed: int) -> np.ndarray:
    """(samples, members): a small noise, member ``NOISY`` 2-4 % late in a sixth of its
    samples all along."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.003, (K, N))
    x[:, NOISY] += np.where(rng.random(K) < 1 / 6, rng.uniform(0.02, 0.04, K), 0.0)
    return x


def test_a_member_late_now_and_then_all_along_late_a_little_at_the_end_is_not_reported():
    """What a healthy 512-GPU job at one call in 64 (three-tier, 80 iterations) filed: a GPU
    late in a sixth of its samples all along was late by 2 % at seven of its last nine,
    and the communicator's rate made that a one in 10^9 change."""
    x = lateness(3)
    x[-9:, NOISY] = [0.04, 0.01, 0.03, 0.001, 0.04, 0.002, 0.02, 0.02, 0.025]
    assert NOISY in [f.rank for f in found(x)]          # a change the member test sees
    assert reported(x) == []


def test_a_gpu_slow_from_a_change_point_after_a_few_late_warm_up_samples_is_reported():
    """A ring holding 22 samples: a GPU late at three of its first eight (its warm-up), 30 %
    late in the 14 since. Its own rate before is known from eight samples only: taken at
    face value (three in eight) it would keep the GPU unreported."""
    x = lateness(5)
    x[:, NOISY] = np.random.default_rng(1).normal(0, 0.003, K)
    x[:K - 22] = np.nan
    x[K - 22 + np.array([1, 4, 6]), NOISY] = 0.05
    x[K - 14:, NOISY] += 0.3
    assert reported(x) == [NOISY]
