"""Report summaries name calls and torch's numbered process groups in words."""

from __future__ import annotations

from functools import partial

from diagnosis.engine import Engine, EngineConfig
from diagnosis.engine.wording import group_words
from tests.support.engine_builders import op_columns, op_row

MS = 1_000_000
STRINGS = ["0", "all_reduce", ""]  # pg 0, op 1, dtype 2 of op_row; pg 0 is torch's "0"
_cols = partial(op_columns, STRINGS)


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
        eng.add_ops(_cols([op_row(r, seq, t + r, t + MS) for r in ranks]))
        eng.advance(t)
    (found,) = eng.finish(t + 10_000 * MS)
    assert "completed all_reduce #20 on process group 0" in found.summary, found.summary


def test_a_hung_ranks_last_call_names_its_group_in_words():
    # pg "0" is every rank's, pg "1" a pair's: rank 1's last call was on "1", then it never
    # entered the next all_reduce on "0" while ranks 0 and 2 wait in it
    cols = partial(op_columns, ["0", "all_reduce", "", "1"])
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r, h in ((0, "h0"), (1, "h0"), (2, "h1")):
        eng.add_rank(r, h)
    eng.add_group("0", [0, 1, 2])
    eng.add_group("1", [0, 1])
    t = 0
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(cols([op_row(r, seq, t + r, t + MS) for r in range(3)]
                         + [op_row(r, seq, t + 2 * MS, t + 3 * MS, pg=3) for r in (0, 1)]))
        eng.advance(t)
    t += 10 * MS
    eng.add_ops(cols([op_row(r, 20, t, -1) for r in (0, 2)]))
    found = [r for r in eng.finish(t + 10_000 * MS) if r.kind == "noncomm_hang"]
    assert found, "no hang"
    assert "last completed all_reduce #19 on process group 1" in found[0].summary, \
        found[0].summary
