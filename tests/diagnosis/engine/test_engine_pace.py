"""The pace of communicators between kept calls (diagnosis/engine/pace.py) on a small made-up
job: two pipeline stages of tensor-parallel groups of four, their data-parallel communicators
tying the replicas of each stage, kept calls handed over in chunks as a trace file gives them."""

from __future__ import annotations

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


def job() -> tuple[Arena, list[int]]:
    arena = Arena(64)
    tp = [arena.add_group(k, f"tp{k}", np.arange(4 * k, 4 * k + 4)) for k in range(6)]
    for i in range(4):       # data-parallel: member i of each replica of a stage
        arena.add_group(100 + i, f"dpA{i}", np.array([4 * k + i for k in range(4)]))
        arena.add_group(200 + i, f"dpB{i}", np.array([4 * k + i for k in (4, 5)]))
    return arena, tp


def calls(g: int, k: int, lo_s: float, hi_s: float, rng: np.random.Generator) -> Finished:
    period = PERIOD_MS[k] * MS
    first = int(np.ceil(lo_s * 1e9 / period))
    seq = np.arange(first, int(hi_s * 1e9 / period))
    t = (seq * period + rng.normal(0, 0.01 * period, len(seq))).astype(np.int64)
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
    # stage B is as far behind the job's median as the slow host, but like its replicas
    assert [f.group for f in found] == [tp[0]]
    # (the job's median pace is 13 ms: 20 ms is 0.77 of it above the replicas' 10)
    assert 0.7 < found[0].excess < 0.85 and found[0].frac > 0.9
