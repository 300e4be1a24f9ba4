"""A rank slower before every call of a step, where every call of the step has its own size (a
sharded model gathers and reduces each layer's parameters once per step): each sample spans a
whole iteration, and the rank is only a little late at each of its many calls. What it delays
its peers by is the sum of those small lags, not the lag at any one call."""

from __future__ import annotations

import numpy as np

from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace
from tests.support.engine_builders import diagnose_written, lockstep

MS = 1_000_000


def write_job(path, slow_rank: int | None, factor: float, layers: int = 16,
              iterations: int = 40, onset: int = 18, seed: int = 0,
              until: int | None = None) -> None:
    """Ranks 0-7 in one communicator; each iteration one all_gather per layer, each with its
    own size, after 4-8 ms of compute (3% jitter, 1% persistent spread per rank). From
    ``onset`` (until ``until``) ``slow_rank`` computes ``factor`` times longer before every
    call."""
    rng = np.random.default_rng(seed)
    ranks = 8
    speed = np.exp(rng.normal(0, 0.01, ranks))
    base = rng.uniform(4, 8, layers) * MS
    free = np.zeros(ranks)
    seq = 0
    with TraceWriter(path) as w:
        w.group("world", list(range(ranks)))
        for it in range(iterations):
            for layer in range(layers):
                own = base[layer] * speed * np.exp(rng.normal(0, 0.03, ranks))
                if slow_rank is not None and onset <= it < (until or iterations):
                    own[slow_rank] *= factor
                enter = free + own
                end = enter.max() + 3 * MS * np.exp(rng.normal(0, 0.02))
                lockstep(w, "world", seq, "all_gather", (32 << 20) + 4096 * layer, enter, end)
                free = np.full(ranks, end)
                seq += 1
        w.end(int(free.max()) + 1)


def diagnose(tmp_path, **kw):
    return diagnose_written(tmp_path / "trace.jsonl", write_job, block_bytes=16 << 10, **kw)


def test_rank_slower_before_every_distinct_call_is_found(tmp_path):
    reports = diagnose(tmp_path, slow_rank=5, factor=1.12)
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert reports[0].suspects[0].rank == 5


def test_distinct_calls_without_a_fault_give_no_report(tmp_path):
    for seed in (1, 2, 3):
        assert diagnose(tmp_path, slow_rank=None, factor=1.0, seed=seed) == []


def test_a_slowdown_that_ended_is_withdrawn_once_later_passes_no_longer_find_it(tmp_path):
    path = tmp_path / "trace.jsonl"
    write_job(path, slow_rank=3, factor=1.5, iterations=120, onset=10, until=22)
    engine = Engine()
    open_at_end, _ = feed_trace(engine, path, block_bytes=16 << 10)
    assert open_at_end == []
    [report] = [r for r in engine.reports() if r.kind == "noncomm_slow"]
    assert report.suspects[0].rank == 3 and report.state == "resolved"
    assert "no longer" in report.evidence["resolved"]
