"""A call of an operation its communicator never completed before (the barrier after a
checkpoint that rank 0 writes alone, an evaluation step) has no learnt duration: it waits the
cold hang bound, so a first checkpoint is not a hang, while a stall in a routine call still is
one within seconds."""

from __future__ import annotations

import numpy as np

from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from tests.support.replay import replay_visible

MS = 1_000_000
RANKS = 8
OPEN_AFTER = 500 * MS


def write_job(path, pause_s: float, op: str, ends: bool = True, iterations: int = 30) -> None:
    """Ranks all-reduce after 200 ms of compute; after the last iteration every rank calls
    ``op`` on the same communicator, rank 0 ``pause_s`` later than the others (it alone writes
    a checkpoint); the call ends once rank 0 is in (if not ``ends``, rank 0 never comes and
    the others wait for ever). Rows come as collectors ship them: at their end, and a call
    pending 500 ms also as an open row."""
    rng = np.random.default_rng(0)
    rows = []
    free = np.zeros(RANKS)
    for seq in range(iterations + 1):
        enter = free + 200 * MS * np.exp(rng.normal(0, 0.03, RANKS))
        name, nbytes = "all_reduce", 1 << 24
        if seq == iterations:
            enter[0] += pause_s * 1e9
            name, nbytes = op, 4
        end = enter.max() + 5 * MS
        for r in range(RANKS):
            if seq == iterations and not ends:
                if r:
                    rows.append((enter[r] + OPEN_AFTER, r, seq, name, nbytes, enter[r], None))
                continue
            if end - enter[r] > OPEN_AFTER:
                rows.append((enter[r] + OPEN_AFTER, r, seq, name, nbytes, enter[r], None))
            rows.append((end, r, seq, name, nbytes, enter[r], end))
        free = np.full(RANKS, end)
    rows.sort(key=lambda x: x[0])
    with TraceWriter(path) as w:
        w.group("world", list(range(RANKS)))
        for _, r, seq, name, nbytes, enter, end in rows:
            w.op(r, "world", seq, name, nbytes, int(enter), None if end is None else int(end))
        w.end(int(rows[-1][0] + 60_000 * MS))


def hangs(tmp_path, **kw):
    path = tmp_path / "t.jsonl"
    write_job(path, **kw)
    engine = Engine()
    replay_visible(engine, path, tail_s=40.0)
    return [r for r in engine.reports() if r.kind.endswith("hang")]


def test_first_checkpoint_barrier_is_not_a_hang(tmp_path):
    assert hangs(tmp_path, pause_s=15, op="barrier") == []


def test_a_pause_before_a_routine_call_is_a_hang_within_seconds(tmp_path):
    [report] = hangs(tmp_path, pause_s=15, op="all_reduce")
    assert report.suspects[0].rank == 0
    assert report.last_seen_ns - report.first_seen_ns >= 10_000 * MS  # filed early


def test_a_new_operation_that_never_ends_is_a_hang_after_the_cold_bound(tmp_path):
    [report] = hangs(tmp_path, pause_s=0, op="barrier", ends=False)
    assert report.kind == "noncomm_hang" and report.suspects[0].rank == 0
    assert report.state == "open"
