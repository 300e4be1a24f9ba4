"""A rank slow before only one of several identical calls per step (same op and size on one
communicator, like equal gradient buckets): its own time must be judged over a whole iteration,
not per pair of consecutive calls, where the excess lands in only some of the samples."""

from __future__ import annotations

import numpy as np

from diagnosis.trace import TraceWriter
from tests.support.engine_builders import diagnose_written, lockstep

MS = 1_000_000


def write_job(path, gaps_ms: tuple[float, ...], slow_rank: int | None, extra_ms: float,
              at: int = 0, iterations: int = 40, onset: int = 15, seed: int = 0) -> None:
    """Ranks 0-5 in one communicator; each iteration, before each of ``len(gaps_ms)`` identical
    all-reduces, every rank computes ``gaps_ms[k]`` (3% jitter). From ``onset`` on
    ``slow_rank`` computes ``extra_ms`` more before call ``at`` only."""
    rng = np.random.default_rng(seed)
    ranks = 6
    free = np.zeros(ranks)
    seq = 0
    with TraceWriter(path) as w:
        w.group("dp", list(range(ranks)))
        for it in range(iterations):
            for k, gap in enumerate(gaps_ms):
                own = gap * MS * np.exp(rng.normal(0, 0.03, ranks))
                if slow_rank is not None and it >= onset and k == at:
                    own[slow_rank] += extra_ms * MS
                enter = free + own
                end = enter.max() + 2 * MS * np.exp(rng.normal(0, 0.02))
                lockstep(w, "dp", seq, "all_reduce", 64 << 20, enter, end)
                free = np.full(ranks, end)
                seq += 1
        w.end(int(free.max()) + 1)


def diagnose(tmp_path, **kw):
    return diagnose_written(tmp_path / "trace.jsonl", write_job, block_bytes=16 << 10, **kw)


def test_slow_before_one_of_three_identical_calls_is_found(tmp_path):
    # 10 ms (20% of the rank's 50 ms of compute per iteration) before the first call only
    reports = diagnose(tmp_path, gaps_ms=(30, 10, 10), slow_rank=2, extra_ms=10)
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert reports[0].suspects[0].rank == 2


def test_slow_before_a_middle_call_is_found(tmp_path):
    reports = diagnose(tmp_path, gaps_ms=(30, 10, 10, 10), slow_rank=4, extra_ms=12, at=2)
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert reports[0].suspects[0].rank == 4


def test_identical_calls_without_a_fault_give_no_report(tmp_path):
    for seed in (1, 2):
        assert diagnose(tmp_path, gaps_ms=(30, 10, 10), slow_rank=None, extra_ms=0,
                        seed=seed) == []
