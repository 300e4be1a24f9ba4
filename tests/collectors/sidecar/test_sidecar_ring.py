"""The detail ring: the last minutes of full records, bounded in bytes, answering requests with
what it still holds."""

from __future__ import annotations

from c4.proto import c4_pb2
from collectors.sidecar.ring import DetailRing, columns_size
from tests.support.reduce_ops import ops

S = 1_000_000_000


def _second(t: int, ranks: int = 2, open_: bool = False):
    rows = [{"rank": r, "pg": "0", "seq": t * 10 + i, "op": "all_reduce",
             "t_enter_ns": t * S + i * 1000, "t_end_ns": None if open_ else t * S + i * 1000 + 500}
            for i in range(10) for r in range(ranks)]
    return ops(rows, ["0", "all_reduce"])


def _req(lo: int, hi: int, ranks=()):
    return c4_pb2.DetailRequest(job="j", attempt=0, fault_id="f", request=1, from_ns=lo * S,
                                to_ns=hi * S - 1, ranks=list(ranks))


def test_answers_the_range_of_the_ranks_asked():
    ring = DetailRing(10 << 20)
    for t in range(10):
        ring.add("j", 0, _second(t))
    a = ring.answer(_req(3, 5, ranks=[1]))
    assert a.status == c4_pb2.DetailBatch.COMPLETE and not a.truncated
    assert set(a.rows["rank"].tolist()) == {1}
    assert sorted(set((a.rows["t_enter_ns"] // S).tolist())) == [3, 4]
    assert len(a.rows) == 20
    assert ring.answer(_req(3, 5)).rows is not None and len(ring.answer(_req(3, 5)).rows) == 40


def test_evicts_the_oldest_and_says_partial_then_gone():
    one = columns_size(_second(0))
    ring = DetailRing(4 * one)
    for t in range(10):
        ring.add("j", 0, _second(t))
    assert ring.bytes <= 4 * one and ring.evicted == 6
    assert ring.held_from("j", 0) == 6 * S
    partial = ring.answer(_req(4, 8))
    assert partial.status == c4_pb2.DetailBatch.PARTIAL
    assert set((partial.rows["t_enter_ns"] // S).tolist()) == {6, 7}
    gone = ring.answer(_req(1, 3))
    assert gone.status == c4_pb2.DetailBatch.GONE and gone.rows is None
    assert gone.held_from_ns == 6 * S


def test_a_completed_row_wins_over_its_open_row_and_the_limit_keeps_the_oldest():
    ring = DetailRing(10 << 20)
    ring.add("j", 0, _second(1, open_=True))
    ring.add("j", 0, _second(1))
    a = ring.answer(_req(0, 5))
    assert len(a.rows) == 20 and (a.rows["t_end_ns"] >= 0).all()
    req = _req(0, 5)
    req.max_records = 6
    cut = ring.answer(req)
    assert cut.truncated and len(cut.rows) == 6
    assert cut.rows["t_enter_ns"].max() <= a.rows["t_enter_ns"][a.rows["t_enter_ns"].argsort()][5]


def test_other_jobs_and_a_zero_ring():
    ring = DetailRing(10 << 20)
    ring.add("other", 0, _second(1))
    assert ring.answer(_req(0, 5)).rows is None
    off = DetailRing(0)
    off.add("j", 0, _second(1))
    assert off.bytes == 0 and off.answer(_req(0, 5)).status == c4_pb2.DetailBatch.GONE
