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
from diagnosis.engine.slow import LatePast, RecStats, SlowRank, judge_rings

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
    past: LatePast = field(default_factory=lambda: LatePast(N, K))

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


class Written(Ring):
    """A ring written one sample at a time, as the engine's rings are: each sample it lets go
    joins the member's past beyond the ring (``slow.LatePast``)."""

    def __init__(self) -> None:
        super().__init__(np.full((1, K, N), np.nan, np.float32),
                         t=np.zeros((1, K), dtype=np.int64))
        self.now = T0

    def write(self, x: np.ndarray) -> None:
        col = self.pos[:1] % K
        self.past.let_go(np.zeros(1, dtype=np.int64), self.x[0:1, col[0]])
        self.x[0, col[0]] = np.clip(x, 0.0, None)
        self.t[0, col[0]] = self.now
        self.pos[0] += 1
        self.now += 5_000_000


def judged_all_along(seed: int, passes: int, extra: float, onset: int | None = None,
                     slower: float = 0.0) -> list[tuple[int, SlowRank]]:
    """Member ``NOISY`` of a full-telemetry ring (K = 1: judged every 32 samples, as
    ``Engine._slow_update`` does) spends ``extra`` more in two spans in five all along, a few
    percent on average (a GPU a little slower than its peers, as chips differ); from pass
    ``onset`` on it is also ``slower`` slower throughout. The findings naming it strongly
    enough to be reported, with the pass each came at."""
    rng = np.random.default_rng(seed)
    arena = Arena(4)
    arena.add_group(0, "tp.0", np.arange(N))
    cfg = EngineConfig()
    strong = np.log(cfg.slow_alpha)
    ring = Written()
    out = []
    for p in range(passes):
        for _ in range(32):
            x = rng.normal(0, 0.02, N)
            x[NOISY] += extra * (rng.random() < 0.4) + (slower if onset is not None
                                                         and p >= onset else 0.0)
            ring.write((x - np.median(x)).astype(np.float32))
        out += [(p, f) for f in judge_rings([ring], arena, cfg)
                if f.rank == NOISY and f.logp < strong]
    return out


def test_a_gpu_a_little_slower_all_along_is_no_change_in_the_last_part_of_its_ring():
    """What a 512-GPU job's full trace filed (rail, 16 layers, a dead switch's run): a GPU
    2-3 % slower than its peers all along, late in about a third of its samples, was late in
    none of the first nine samples of one ring and in 45 % of the 55 after, which the ring alone
    took for a change. Its ring at that call rate spans a third of a second; before it, the
    GPU was as late as after. Without its past, this GPU is reported in about half of such
    runs of 200 passes."""
    for seed in range(8):
        assert judged_all_along(seed, 200, 0.07) == []


def test_a_gpu_a_little_slower_all_along_that_slows_down_is_found_within_a_ring():
    """The same GPU 7 % slower from pass 100 on (a fault's least excess is 6 %): found within
    a ring's worth of passes, strongly enough to be reported. Its past tells how often it
    was late, not that it may be late by more."""
    for seed in range(4):
        found = judged_all_along(seed, 110, 0.07, onset=100, slower=0.07)
        assert found and found[0][0] in (100, 101, 102, 103), found[:1]
