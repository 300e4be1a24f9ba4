"""The pace of communicators between kept calls (diagnosis/engine/pace.py) on a small made-up
job: two pipeline stages of tensor-parallel groups of four, their data-parallel communicators
tying the replicas of each stage, kept calls handed over in chunks as a trace file gives them."""

from __future__ import annotations

import itertools

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.pace import GroupPace

MS = 1_000_000
# stage A: groups 0-3 at 10 ms a call, group 0 (a slow host) at 20 ms from the first call on;
# stage B: groups 4-5 at 16 ms a call, all of them, by their role
PERIOD_MS = [20.0, 10.0, 10.0, 10.0, 16.0, 16.0]
SECONDS = 40
CHUNK_S = 8
CALLS = 25           # calls of an iteration
STAGE = [range(4)] * 4 + [range(4, 6)] * 2     # the replicas of each group's stage


def job() -> tuple[Arena, list[int]]:
    arena = Arena(64)
    tp = [arena.add_group(k, f"tp{k}", np.arange(4 * k, 4 * k + 4)) for k in range(6)]
    for i in range(4):       # data-parallel: member i of each replica of a stage
        arena.add_group(100 + i, f"dpA{i}", np.array([4 * k + i for k in range(4)]))
        arena.add_group(200 + i, f"dpB{i}", np.array([4 * k + i for k in (4, 5)]))
    return arena, tp


def calls(g: int, k: int, lo_s: float, hi_s: float, rng: np.random.Generator) -> Finished:
    """The calls of group ``g`` between two times: iterations of ``CALLS`` calls at its
    period, each begun by every group of the job together, when the slowest is done (the
    data-parallel all-reduce ends each iteration, and the pipeline ties the stages)."""
    period = PERIOD_MS[k] * MS
    iteration = CALLS * max(PERIOD_MS) * MS + 5 * MS
    first = int(lo_s * 1e9 // iteration)
    it = np.arange(first, int(hi_s * 1e9 // iteration) + 1)
    seq = (it[:, None] * CALLS + np.arange(CALLS)[None, :]).ravel()
    t = (it[:, None] * iteration + np.arange(CALLS)[None, :] * period).ravel()
    keep = (t >= lo_s * 1e9) & (t < hi_s * 1e9)
    seq = seq[keep]
    t = (t[keep] + rng.normal(0, 0.01 * period, len(seq))).astype(np.int64)
    enter = np.repeat(t[:, None], 4, axis=1)
    zero = np.zeros_like(enter)
    return Finished(seq, np.full(len(seq), g), seq, enter, enter + MS, zero - 1,
                    zero.astype(np.int8))


def feed(pace: GroupPace, tp: list[int]) -> None:
    """Each span of seconds twice: the calls of the first half of the groups, then the
    other half's (as the chunks of a trace file complete them)."""
    rng = np.random.default_rng(3)
    for lo in range(0, SECONDS, CHUNK_S):
        for half in (tp[:3], tp[3:]):
            for g in half:
                pace.update(calls(g, tp.index(g), lo, lo + CHUNK_S, rng))


def test_a_bucket_waits_for_the_groups_of_the_next_chunk():
    """A bucket written before the second half's calls came would have too few groups to
    compare and be lost."""
    arena, tp = job()
    pace = GroupPace(arena, EngineConfig())
    feed(pace, tp)
    size = pace.sizes[4]
    rows = min(size.pos, size.K)
    assert not np.isnan(size.x[:rows][:, [size.col[g] for g in tp]]).any()
    # all but the buckets closed before the first second half showed how late it comes, and
    # the last ones, still open
    assert rows >= SECONDS - 2 * CHUNK_S, rows


def test_a_group_slow_from_the_start_is_judged_against_the_replicas_of_its_stage():
    arena, tp = job()
    pace = GroupPace(arena, EngineConfig())
    feed(pace, tp)
    found = pace.judge()
    # stage B computes slower than stage A, but as fast as its replica
    assert [f.group for f in found] == [tp[0]]
    # (its replicas take 10 ms over the calls it takes 20 ms over)
    assert 0.9 < found[0].excess < 1.1 and found[0].frac > 0.9


# ---- episodes: eight replicas of one stage, each second at its own pace --------------------

REPLICAS = 8


def replicas(n: int = REPLICAS) -> tuple[Arena, list[int]]:
    arena = Arena(4 * n)
    tp = [arena.add_group(k, f"tp{k}", np.arange(4 * k, 4 * k + 4)) for k in range(n)]
    for i in range(4):
        arena.add_group(1000 + i, f"dp{i}", np.array([4 * k + i for k in range(n)]))
    return arena, tp


def paced_calls(g: int, factor: np.ndarray, hi_s: int, state: tuple[int, float],
                rng: np.random.Generator, waits: np.ndarray | None = None
                ) -> tuple[Finished, tuple[int, float]]:
    """Calls of group ``g`` from where ``state`` (next seq, next call time) left off until
    second ``hi_s``, at 10 ms times ``factor[s]`` a call in second s (1% jitter per call); in
    the seconds ``waits`` marks, seven calls in eight come after a wait as long as 1.5 calls."""
    seq, at = state
    t: list[int] = []
    while at < hi_s * 1e9:
        s = int(at // 1e9)
        period = 10 * MS * factor[s]
        t.append(int(at + rng.normal(0, 0.01 * period)))
        at += period * (2.5 if waits is not None and waits[s] and len(t) % 8 else 1.0)
    n = len(t)
    sq = np.arange(seq, seq + n)
    enter = np.repeat(np.asarray(t, dtype=np.int64)[:, None], 4, axis=1)
    zero = np.zeros_like(enter)
    return Finished(sq, np.full(n, g), sq, enter, enter + MS, zero - 1,
                    zero.astype(np.int8)), (seq + n, at)


def judge_paces(factors: np.ndarray, waits: np.ndarray | None = None) -> list:
    """The groups found behind, for per-group, per-second pace factors (and seconds with
    waits), fed in chunks."""
    arena, tp = replicas()
    pace = GroupPace(arena, EngineConfig())
    rng = np.random.default_rng(9)
    state = [(0, 0.0)] * REPLICAS
    for lo in range(0, SECONDS, CHUNK_S):
        for k, g in enumerate(tp):
            fin, state[k] = paced_calls(g, factors[k], lo + CHUNK_S, state[k], rng,
                                        None if waits is None else waits[k])
            pace.update(fin)
    return pace.judge()


def noisy_paces(seed: int, sigma: float = 0.03) -> np.ndarray:
    """Each group's pace moves by about ``sigma`` from second to second."""
    return np.random.default_rng(seed).normal(1.0, sigma, (REPLICAS, SECONDS))


def test_a_host_slow_one_second_in_three_is_found_again_and_again():
    """A host 2.5x slower in one second of three from second 8 on (what else it runs, a
    flapping power cap) is behind in a third of the buckets only: no change point to a level,
    but too many episodes for the rate at which the other groups have them."""
    f = noisy_paces(1)
    f[0, 8::3] *= 2.5
    found = judge_paces(f)
    assert [x.group for x in found] == [0]
    assert found[0].duty is not None and 0.2 < found[0].duty < 0.5
    assert found[0].episodes >= 3
    assert 1.0 < found[0].excess < 2.0


def test_a_group_behind_in_a_few_buckets_is_no_host_slow_from_a_change_point():
    """Far behind in three of the last eight buckets, at the noise's upper edge in two more
    (a group whose few kept calls straddle the waits that a slow network puts into its spans):
    five of eight buckets above the noise made a change point, but no level holds; as
    episodes they are too few."""
    f = noisy_paces(2, 0.02)
    # the newest buckets judged (those of the last chunk are still open)
    f[0, 23:31] = [1.05, 1.73, 1.0, 1.42, 1.41, 1.01, 1.055, 0.99]
    assert judge_paces(f) == []


def test_healthy_groups_with_noisy_paces_are_not_found():
    for seed in range(3):
        assert judge_paces(noisy_paces(10 + seed)) == []


def test_a_group_a_little_behind_where_every_group_spreads_wide_is_within_their_noise():
    """From second 24 on every group's pace spreads about 8% from second to second (a slow
    switch makes the groups on its paths wait in some spans; a trace's last, partial bucket),
    and one group is 7% behind: within the noise of those buckets, though above the ring's
    usual threshold. In buckets where the groups keep within 1%, the same 7% is a slow
    host."""
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        calm = noisy_paces(seed, 0.01)
        wide = calm.copy()
        wide[:, 24:] = rng.normal(1.0, 0.08, (REPLICAS, SECONDS - 24))
        wide[0, 24:] += 0.07
        calm[0, 24:] += 0.07
        assert judge_paces(wide) == []
        assert [x.group for x in judge_paces(calm)] == [0]


def test_a_group_that_waits_in_most_spans_now_and_then_is_a_victim():
    """Behind a slow NIC or a slow network, a group waits in seven spans of eight, one second
    in three: a low quantile of its periods is behind again and again, as a slow host's is,
    but some span between the waits keeps its pace, which a slow host's never does."""
    f = noisy_paces(3)
    waits = np.zeros((REPLICAS, SECONDS), dtype=bool)
    waits[0, 8::3] = True
    assert judge_paces(f, waits) == []


def test_groups_behind_together_now_and_then_are_an_event_of_the_job():
    """Three replicas slow in the same seconds, one in three (congestion of the network
    their transfers cross makes every span of theirs wait): more groups at once than a fault
    or two explain, so no host is named; the one slow host beside them still is."""
    f = noisy_paces(4)
    f[1:4, 8::3] *= 2.0
    assert judge_paces(f) == []
    f[0, 9::3] *= 2.5
    assert [x.group for x in judge_paces(f)] == [0]


# ---- sampled calls: spans of different work ---------------------------------------------------
# the replicas of one stage run, iteration after iteration, FORWARD calls 10 ms apart then
# BACKWARD calls 20 ms apart (a backward pass computes twice as long), in step: the data-
# parallel all-reduce at the end of each iteration waits for the last of them

FORWARD, BACKWARD = 40, 40
PAUSE_MS = 300.0      # a rank's one-off pause (a garbage collection)
ITERATIONS = 24


def lockstep(kept: list[np.ndarray], slow: dict[int, np.ndarray],
             rng: np.random.Generator, iterations: int = ITERATIONS,
             passes: tuple[int, int] = (FORWARD, BACKWARD), wait_ms: float = 5.0,
             call_ms: float = 10.0, pauses: dict[int, dict[int, int]] | None = None
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per replica, its kept calls (seq, time): ``kept[k]`` marks the calls of an iteration it
    keeps (or, two-dimensional, of each iteration), ``slow[k]`` per iteration its compute
    factor (a slow host); every replica starts an iteration when the slowest ended the one
    before."""
    per_call = np.r_[np.full(passes[0], call_ms), np.full(passes[1], 2 * call_ms)] * MS
    calls = sum(passes)
    out: list[tuple[list[int], list[int]]] = [([], []) for _ in kept]
    start = 0.0
    for it in range(iterations):
        ends = []
        for k, marks in enumerate(kept):
            keep = marks[it] if marks.ndim == 2 else marks
            factor = slow[k][it] if k in slow else 1.0
            step = per_call * factor * rng.normal(1.0, 0.01, calls)
            pause = (pauses or {}).get(k, {})
            if it in pause:
                step[pause[it]] += PAUSE_MS * MS
            t = start + np.r_[0.0, np.cumsum(step)[:-1]]
            seq = it * calls + np.arange(calls)
            out[k][0].extend(seq[keep].tolist())
            out[k][1].extend(t[keep].astype(np.int64).tolist())
            ends.append(start + step.sum())
        start = max(ends) + wait_ms * MS
    return [(np.asarray(s, dtype=np.int64), np.asarray(t, dtype=np.int64)) for s, t in out]


def judge_lockstep(kept: list[np.ndarray], slow: dict[int, np.ndarray] | None = None,
                   iterations: int = ITERATIONS, sample: int = 1,
                   passes: tuple[int, int] = (FORWARD, BACKWARD), wait_ms: float = 5.0,
                   call_ms: float = 10.0, pauses: dict[int, dict[int, int]] | None = None
                   ) -> list:
    arena, tp = replicas(len(kept))
    pace = GroupPace(arena, EngineConfig())
    pace.sample = sample
    series = lockstep(kept, slow or {}, np.random.default_rng(5), iterations, passes, wait_ms,
                      call_ms, pauses)
    end = max(int(t[-1]) for _, t in series)
    for lo in range(0, end + CHUNK_S * 10**9, CHUNK_S * 10**9):
        for g, (seq, t) in zip(tp, series, strict=True):
            m = (t >= lo) & (t < lo + CHUNK_S * 10**9)
            enter = np.repeat(t[m][:, None], 4, axis=1)
            zero = np.zeros_like(enter)
            pace.update(Finished(seq[m], np.full(int(m.sum()), g), seq[m], enter, enter + MS,
                                 zero - 1, zero.astype(np.int8)))
    return pace.judge()


def every_fourth(offset: int, only_backward: bool = False) -> np.ndarray:
    keep = (np.arange(FORWARD + BACKWARD) + offset) % 4 == 0
    if only_backward:
        keep[:FORWARD] = False
    return keep


def test_a_group_that_keeps_only_backward_calls_is_paced_like_its_replicas():
    """One group keeps calls of backward passes only (the sampling rule hashes the group's
    name with the sequence number: which calls a group keeps is its own), its replicas some of
    every pass. Its time per call is twice theirs in every bucket, but over the same calls
    they took as long as it did: no host is slow."""
    kept = [every_fourth(0, only_backward=True)] + [every_fourth(k) for k in range(1, REPLICAS)]
    assert judge_lockstep(kept) == []


def test_a_slow_host_among_groups_keeping_other_calls_is_found():
    """The same sampling with a host 2.5x slower from the first iteration (its replicas wait
    for it at the all-reduce), and one slower again and again (2x, one iteration in four from
    the seventh on)."""
    kept = [every_fourth(k, only_backward=k == 3) for k in range(REPLICAS)]
    found = judge_lockstep(kept, {1: np.full(ITERATIONS, 2.5)})
    assert [f.group for f in found] == [1]
    assert found[0].duty is None and found[0].excess > 0.8
    factor = np.ones(ITERATIONS)
    factor[6::4] = 2.0
    found = judge_lockstep(kept, {2: factor})
    assert [f.group for f in found] == [2]
    assert found[0].duty is not None and found[0].episodes >= 3


# ---- one call in K kept, K too large for spans of a few dozen calls ---------------------------
# iterations of 320 calls (4.8 s): a group keeps about five calls of each
K = 64
LONG = 48
PASSES = (160, 160)
ONSET = 20


def one_in_k(seed: int, replicas: int = REPLICAS, iterations: int = LONG,
             passes: tuple[int, int] = PASSES) -> list[np.ndarray]:
    """Per replica, the calls of each iteration it keeps: one in ``K`` at random, as the
    sampling rule's hash of its name and the sequence number picks them."""
    rng = np.random.default_rng(seed)
    return [rng.random((iterations, sum(passes))) < 1 / K for _ in range(replicas)]


def slow_from(onset: int, factor: float) -> np.ndarray:
    out = np.ones(LONG)
    out[onset:] = factor
    return out


def test_with_one_call_in_64_healthy_replicas_are_not_found():
    for seed in (1, 2):
        assert judge_lockstep(one_in_k(seed), iterations=LONG, sample=K, passes=PASSES) == []


def test_with_one_call_in_64_a_host_slow_from_some_iteration_on_is_found_then():
    """A host 15% slower from iteration 20 on. Its spans between kept calls run over dozens
    of calls, through the others' waits, and each replica's own kept calls are too far apart
    to read its time at a sequence number off them. Its replicas pooled are not; and the slow
    host, which the pooled time of the others' replicas leaves out once it falls behind them,
    is not found among those."""
    for seed in (1, 2):
        found = judge_lockstep(one_in_k(seed), {3: slow_from(ONSET, 1.15)}, iterations=LONG,
                               sample=K, passes=PASSES)
        assert [f.group for f in found] == [3], seed
        assert found[0].duty is None and 0.08 < found[0].excess < 0.25
        # its onset: within a few buckets after the change
        assert ONSET * 4.8e9 <= found[0].onset_ns <= (ONSET + 6) * 4.8e9
        # and its buckets' span, which that onset may precede the change by: seconds
        assert 1e9 <= found[0].every_ns <= 16e9


def test_with_one_call_in_64_the_backward_spans_of_a_host_behind_count():
    """A host 30% slower from iteration 20 on, five seeds of the kept calls. Its replicas
    computed throughout in spans of backward calls as well, at twice their forward time per
    call: a calm bound at twice the bucket's least (mostly a forward span's) kept only some
    of them, and many of the host's buckets kept too few calm spans for a value: found with
    two seeds of five. Where a bucket has too few, the wider bound takes them in."""
    found = [judge_lockstep(one_in_k(seed), {3: slow_from(ONSET, 1.3)}, iterations=LONG,
                            sample=K, passes=PASSES) for seed in range(1, 6)]
    assert all([f.group for f in one] in ([], [3]) for one in found)
    hits = [one[0] for one in found if one]
    assert len(hits) >= 4
    assert all(f.duty is None and 0.2 < f.excess < 0.4 for f in hits)


def test_with_one_call_in_64_a_host_slow_for_the_last_ten_iterations_is_found():
    """The same host slow from iteration 38 of 48: its group has a value in six buckets after
    the change (five where only spans of forward calls were calm), some with none between.
    So few buckets, each the median of a few calm spans against the pooled replicas, are
    enough, and the empty buckets do not cut the change into pieces; its onset is its first
    bucket."""
    found = judge_lockstep(one_in_k(1), {3: slow_from(38, 1.15)}, iterations=LONG,
                           sample=K, passes=PASSES)
    assert [f.group for f in found] == [3]
    assert found[0].samples == 6 and 0.1 < found[0].excess < 0.2
    assert 38 * 4.8e9 <= found[0].onset_ns <= 39 * 4.8e9


def test_with_one_call_in_64_the_rule_for_short_spans_sees_nothing():
    """What the rule for spans of a few dozen calls at most makes of the same job (a stream
    it takes to keep every call in a few)."""
    assert judge_lockstep(one_in_k(1), {3: slow_from(ONSET, 1.15)}, iterations=LONG,
                          sample=1, passes=PASSES) == []


# ---- one call in K kept, a host slow now and then ----------------------------------------------
# sixteen replicas, iterations of 256 calls (0.38 s of compute) and a wait of half a second at
# their end (the pipeline's flush, the data-parallel all-reduce), which the waits' cycle
# shows (``cycle``): a bucket holds about eight kept calls of a group, a window of the
# recurrence test about four
MANY = 16
TURNS = 64
SHORT = (128, 128)


def one_in_k_of(seed: int) -> list[np.ndarray]:
    return one_in_k(seed, MANY, TURNS, SHORT)


def judge_turns(seed: int, slow: dict[int, np.ndarray] | None = None,
                pauses: dict[int, dict[int, int]] | None = None) -> list:
    return judge_lockstep(one_in_k_of(seed), slow, iterations=TURNS, sample=K, passes=SHORT,
                          wait_ms=500.0, call_ms=1.0, pauses=pauses)


def test_with_one_call_in_64_a_host_slow_one_iteration_in_four_is_found_again_and_again():
    """Twice as slow one iteration in four from the eighth on. A bucket's value, the median of
    its calm spans, holds one slow iteration and one normal: with some seeds of the kept calls
    no bucket was far enough behind often enough (found with six of eight). Per iteration, the
    lower median of the calm spans that hold no wait of the cycle is behind in each slow one."""
    factor = np.ones(TURNS)
    factor[8::4] = 2.0
    found = [judge_turns(seed, {3: factor}) for seed in range(1, 9)]
    assert all([f.group for f in one] == [3] for one in found), found
    assert all(one[0].duty is not None and 0.8 < one[0].excess < 1.2 for one in found)


def between_kept_calls(kept: np.ndarray, every: int) -> dict[int, int]:
    """Every ``every`` iterations from the eighth, a kept call whose next kept call is in the
    same pass: a pause after it falls in the one span between them, inside an iteration."""
    out = {}
    for it in range(8, TURNS, every):
        pos = np.flatnonzero(kept[it])
        for a, b in itertools.pairwise(pos):
            if a // SHORT[0] == b // SHORT[0] and a % SHORT[0] >= 2:
                out[it] = int(a)
                break
    return out


def test_with_one_call_in_64_one_off_pauses_in_single_spans_are_no_host_slow_now_and_then():
    """A group pauses 0.3 s (a garbage collection of one of its ranks) one iteration in
    three, each time inside one span between its kept calls: that span reads several times
    its replicas' time, a slow host's would as well, but none of its other spans there does.
    A window's value is the lower median of two calm spans or more, which leaves it out."""
    for seed in range(1, 5):
        pauses = {5: between_kept_calls(one_in_k_of(seed)[5], 3)}
        assert len(pauses[5]) >= 15
        assert judge_turns(seed, pauses=pauses) == [], seed
