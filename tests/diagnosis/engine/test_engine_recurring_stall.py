"""Rank 0 writes a checkpoint every 6 s while its peer waits 2 s: the first pauses are
reported (and cleared), then the pause is known as the job's rhythm and no longer files a hang;
a real hang after that is still found."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import OP_COLUMNS, Columns
from diagnosis.engine import Engine

MS = 1_000_000


def _cols(rows) -> Columns:
    arr = {k: np.array([row[i] for row in rows], dtype=dt)
           for i, (k, dt) in enumerate(OP_COLUMNS.items())}
    return Columns(arr, ["tp", "all_reduce", ""])


def _row(rank, seq, enter, end):
    # rank pg seq op nbytes dtype t_enter t_start t_end status peer
    return (rank, 0, seq, 1, 1024, 2, enter, -1, end, 0, -1)


def _hangs(eng: Engine) -> list:
    return [r for r in eng.reports() if r.kind == "noncomm_hang"]


def test_a_recurring_checkpoint_pause_stops_filing_hangs():
    eng = Engine()
    eng.add_rank(0, "h0")
    eng.add_rank(1, "h1")
    eng.add_group("tp", [0, 1])
    t, seq = 0, 0
    for _ in range(8):                       # 8 checkpoints, 6 s of steps between them
        for _ in range(100):
            eng.add_ops(_cols([_row(r, seq, t + r * 50_000, t + 2 * MS) for r in (0, 1)]))
            seq += 1
            t += 60 * MS
            if seq % 25 == 0:
                eng.advance(t)
        # rank 1 enters call `seq` and ships it open; rank 0 checkpoints for 2 s
        eng.add_ops(_cols([_row(1, seq, t, -1)]))
        for step in range(1, 11):
            eng.advance(t + step * 200 * MS)
        t += 2000 * MS
        eng.add_ops(_cols([_row(0, seq, t, t + 2 * MS), _row(1, seq, t - 2000 * MS, t + 2 * MS)]))
        seq += 1
        t += 10 * MS
        eng.advance(t)
    filed = _hangs(eng)
    assert 1 <= len(filed) <= 2, [(r.id, r.first_seen_ns) for r in filed]
    assert all(r.state == "resolved" and r.evidence.get("cleared") for r in filed)
    # a real hang: rank 0 never comes to the next call
    eng.add_ops(_cols([_row(1, seq, t, -1)]))
    for step in range(1, 41):
        eng.advance(t + step * 250 * MS)
    still = [r for r in _hangs(eng) if r.state == "open"]
    assert still and still[0].suspects[0].rank == 0
