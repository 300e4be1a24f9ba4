"""Spans between kept calls cut by the job's iterations (``GroupPace``, diagnosis/engine/pace.py,
with ``cycle.learn_cycle``), and a send/recv channel's side late again and again
(``SampledStragglers.judge``, diagnosis/engine/straggle.py).

Eight data-parallel replicas of a pipeline's first stage, tensor-parallel groups of four, keep
one call in 16 each (each its own calls, as the sampling rule hashes the group's name). An
iteration is a forward pass of 128 calls, a wait for the later stages (the pipeline's bubble),
a backward pass of 128 calls at twice the compute, and the data-parallel all-reduce, which
waits for the slowest replica: about 1.1 s, so 1 s buckets of time straddle iterations. That is
bench.accuracy.hard's ``int-slow_host-512-2`` at K = 16 (node012, the first stage of its
pipeline, 3.4x slow one iteration in five): its slow passes fell into buckets shared with a
normal iteration's, whose spans set the buckets' fastest span and low quantile, and it was
missed. The same run filed a false slow GPU on rank 490 "slow again and again" in its send/recv
channel ``pp.122:490>498``: the sender entered the kept transfers after the receiver by a
quarter of the channel's pace in four of six, as the pipeline's schedule has it."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.cycle import learn_cycle
from diagnosis.engine.pace import GroupPace
from diagnosis.engine.straggle import SampledStragglers
from diagnosis.engine.timing import GroupTiming

MS = 1_000_000
REPLICAS = 8
FORWARD = BACKWARD = 128            # calls of a pass
PERIOD = FORWARD + BACKWARD         # calls of an iteration
K = 16
ITERATIONS = 40
FORWARD_MS, BACKWARD_MS = 0.625, 1.25  # time per call
BUBBLE_MS, ALL_REDUCE_MS = 600.0, 200.0


def lockstep(slow: dict[int, np.ndarray], seed: int = 5
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per replica, its kept calls (seq, entry time); ``slow[k]``: per iteration, replica k's
    compute factor. Every replica starts an iteration when the slowest has ended the one
    before (the data-parallel all-reduce)."""
    rng = np.random.default_rng(seed)
    keep = [rng.random(ITERATIONS * PERIOD) < 1 / K for _ in range(REPLICAS)]
    out: list[tuple[list[int], list[int]]] = [([], []) for _ in range(REPLICAS)]
    start = 0.0
    for it in range(ITERATIONS):
        ends = []
        for k in range(REPLICAS):
            f = slow[k][it] if k in slow else 1.0
            step = np.r_[np.full(FORWARD, FORWARD_MS), np.full(BACKWARD, BACKWARD_MS)] * MS \
                * f * rng.normal(1.0, 0.01, PERIOD)
            step[FORWARD - 1] += BUBBLE_MS * MS      # (waiting for the later stages)
            t = start + np.r_[0.0, np.cumsum(step)[:-1]]
            seq = it * PERIOD + np.arange(PERIOD)
            mine = keep[k][seq]
            out[k][0].extend(seq[mine].tolist())
            out[k][1].extend(t[mine].astype(np.int64).tolist())
            ends.append(start + step.sum())
        start = max(ends) + ALL_REDUCE_MS * MS
    return [(np.asarray(s, dtype=np.int64), np.asarray(t, dtype=np.int64)) for s, t in out]


def judge(slow: dict[int, np.ndarray], until_s: float = 1e9) -> tuple[GroupPace, list]:
    """The groups found behind, the kept calls handed over a second at a time (until second
    ``until_s``)."""
    arena = Arena(64)
    tp = [arena.add_group(k, f"tp{k}", np.arange(4 * k, 4 * k + 4)) for k in range(REPLICAS)]
    for i in range(4):
        arena.add_group(100 + i, f"dp{i}", np.array([4 * k + i for k in range(REPLICAS)]))
    pace = GroupPace(arena, EngineConfig())
    series = lockstep(slow)
    end = min(max(int(t[-1]) for _, t in series), int(until_s * 1e9))
    for lo in range(0, end + 10**9, 10**9):
        for g, (seq, t) in zip(tp, series, strict=True):
            m = (t >= lo) & (t < lo + 10**9)
            enter = np.repeat(t[m][:, None], 4, axis=1)
            zero = np.zeros_like(enter)
            pace.update(Finished(seq[m], np.full(int(m.sum()), g), seq[m], enter, enter + MS,
                                 zero - 1, zero.astype(np.int8)))
    return pace, pace.judge()


def spans_of(series: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """The spans between consecutive kept calls of each replica, as ``GroupPace`` keeps them
    (at most 32 calls)."""
    g, s1, s2, dt = [], [], [], []
    for k, (seq, t) in enumerate(series):
        ok = np.diff(seq) <= 32
        g.append(np.full(int(ok.sum()), k))
        s1.append(seq[:-1][ok])
        s2.append(seq[1:][ok])
        dt.append(np.diff(t)[ok])
    return tuple(np.concatenate(x) for x in (g, s1, s2, dt))


def test_the_iterations_are_learnt_from_the_recurring_waits():
    g, s1, s2, dt = spans_of(lockstep({}))
    early = s2 < 8 * PERIOD
    cycle = learn_cycle(g[early], s1[early], s2[early], dt[early])
    assert cycle is not None
    # the iteration, or a part of it that every iteration's end falls on (the bubble falls at
    # the middle of each: cut there too, no bucket holds two iterations)
    assert PERIOD % cycle.period == 0
    assert min(cycle.phase % cycle.period, -cycle.phase % cycle.period) <= 1


def test_pauses_at_random_calls_make_no_iterations():
    """Calls at a steady pace with a pause now and then (GC, a checkpoint), at no recurring
    point."""
    rng = np.random.default_rng(1)
    calls = 8000
    step = rng.normal(1.0, 0.05, calls) * MS
    step[rng.choice(calls, 16, replace=False)] += 200 * MS
    t = np.cumsum(step).astype(np.int64)
    groups = [np.flatnonzero(rng.random(calls) < 1 / K) for _ in range(4)]
    g = np.concatenate([np.full(len(s) - 1, k) for k, s in enumerate(groups)])
    s1 = np.concatenate([s[:-1] for s in groups])
    s2 = np.concatenate([s[1:] for s in groups])
    ok = s2 - s1 <= 32
    assert learn_cycle(g[ok], s1[ok], s2[ok], (t[s2] - t[s1])[ok]) is None


def test_a_host_slow_one_iteration_in_five_is_found_by_its_fifth():
    """3.4x slower in one iteration of five from the seventh on: its slow iterations are
    buckets of their own, behind in every span between the waits, so five of them are
    episodes enough (with 1 s buckets, two of its first five were behind in none)."""
    factor = np.ones(ITERATIONS)
    factor[6::5] = 3.4
    # (the fifth slow iteration, the 27th, ends at about 31 s)
    pace, found = judge({2: factor}, until_s=34)
    assert pace.cycles
    assert [f.group for f in found] == [2]
    assert found[0].duty is not None and found[0].episodes >= 3


def test_replicas_in_lockstep_are_not_found():
    _, found = judge({})
    assert found == []


def test_a_channel_side_late_again_and_again_is_no_slow_gpu():
    """Pipelines of two stages, each handing its activations on over a send/recv channel of
    two ranks; in one channel, the kept transfers find the sender entering half the channel's
    pace after the receiver in four samples of the last eight (the point of the
    schedule each falls at), in the others now and then. No GPU is slow."""
    arena = Arena(64)
    pipes = 32
    pg = np.arange(pipes)
    names = [f"pp.{p}" for p in range(pipes)]
    channels = arena.channels(pg, 2 * pg, 2 * pg + 1, names)
    cfg = EngineConfig()
    timing = GroupTiming(arena, cfg)
    pace_ns = 500 * MS
    timing.pace = lambda groups, min_periods=1: np.full(len(groups), float(pace_ns))
    st = SampledStragglers(arena, timing, cfg)
    st.sample = K
    rng = np.random.default_rng(11)
    t0 = 10**10
    for i in range(15):        # (the last closes the one before)
        t = t0 + i * 6 * 10**9
        late = np.where(rng.random(pipes) < 0.03, 0.5 * pace_ns, 0.0)
        late[0] = 0.5 * pace_ns if i in (6, 7, 10, 12) else 0.0
        recv = np.full(pipes, t) + rng.normal(0, 0.001 * pace_ns, pipes)
        enter = np.stack([recv + late, recv], axis=1).astype(np.int64)
        seq = np.full(pipes, i * K)
        zero = np.zeros_like(enter)
        st.update(Finished(seq, channels, seq, enter, enter + MS, zero - 1,
                           zero.astype(np.int8)))
    assert [f.rank for f in st.judge()] == []
