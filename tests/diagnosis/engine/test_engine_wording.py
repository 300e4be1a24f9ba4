"""Report summaries name calls and torch's numbered process groups in words."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import OP_COLUMNS, Columns
from diagnosis.engine import Engine, EngineConfig
from diagnosis.engine.wording import group_words

MS = 1_000_000


def _cols(rows) -> Columns:
    # rank pg seq op nbytes dtype t_enter t_start t_end status peer; pg 0 is torch's "0"
    arr = {k: np.array([row[i] for row in rows], dtype=dt)
           for i, (k, dt) in enumerate(OP_COLUMNS.items())}
    return Columns(arr, ["0", "all_reduce", ""])


def _row(rank, seq, enter, end):
    return (rank, 0, seq, 1, 1024, 2, enter, -1, end, 0, -1)


def test_numbered_groups_read_as_groups():
    assert group_words("0") == "process group 0"
    assert group_words("tp-0") == "tp-0"
    assert group_words("tp-0", "group") == "group tp-0"


def test_a_rank_that_stopped_reporting_is_worded_with_its_call_and_group():
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r, h in ((0, "h0"), (1, "h0"), (2, "h1")):
        eng.add_rank(r, h)
    eng.add_group("0", [0, 1, 2])
    t = 0
    for seq in range(30):
        t += 10 * MS
        ranks = range(3) if seq < 20 else range(2)
        eng.add_ops(_cols([_row(r, seq, t + r, t + MS) for r in ranks]))
        eng.advance(t)
    (found,) = eng.finish(t + 10_000 * MS)
    assert "completed all_reduce #20 on process group 0" in found.summary, found.summary
