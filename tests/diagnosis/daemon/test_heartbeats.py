"""The collectors' signs of life between two passes: one entry per rank, the newest, whatever
order and form they came in, and bounded."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto import c4_pb2
from c4.proto.codec import BatchError, Columns, encode_collectors
from diagnosis.daemon.heartbeats import Heartbeats


def _stats(job: str, rank, t_ns, recorded=None, leaving=None) -> c4_pb2.SidecarStats:
    rank = np.asarray(rank)
    n = len(rank)
    zeros = np.zeros(n, np.int64)
    cols = Columns({"rank": rank, "recorded": zeros if recorded is None else recorded,
                    "dropped": zeros, "shipped": zeros,
                    "t_ns": np.broadcast_to(np.asarray(t_ns), (n,)),
                    "leaving": zeros if leaving is None else leaving})
    return c4_pb2.SidecarStats(collector_columns=[encode_collectors(job, cols)])


def test_each_rank_keeps_its_newest_time_most_calls_and_last_words():
    hb = Heartbeats()
    hb.add(_stats("j", [3, 1, 2], [30, 10, 0], recorded=[300, 100, 200], leaving=[0, 1, 0]))
    hb.add(_stats("j", [1, 3], [5, 20], recorded=[50, 310]))     # an older copy of rank 1
    hb.add(_stats("k", [1], 7))
    got = hb.take()
    j = got[("j", 0)]
    # rank 2 has not spoken yet (t_ns 0): it says nothing
    assert j.rank.tolist() == [1, 3]
    assert j.t_ns.tolist() == [10, 30]
    assert j.recorded.tolist() == [100, 310]
    assert j.leaving.tolist() == [True, False]
    assert got[("k", 0)].rank.tolist() == [1]
    assert hb.take() == {}


def test_too_many_waiting_are_merged_then_the_excess_dropped():
    hb = Heartbeats(max_waiting=13)
    for t in range(1, 4):                       # 3 x 6 entries of the same 6 ranks
        hb.add(_stats("j", np.arange(6), t))
    assert hb.dropped == 0
    hb.add(_stats("k", np.arange(100, 108), 1))   # 6 + 8 > 13 even merged
    assert hb.dropped == 8
    got = hb.take()
    assert got[("j", 0)].t_ns.tolist() == [3] * 6 and ("k", 0) not in got


def test_columns_that_do_not_decode_are_refused_whole():
    hb = Heartbeats()
    bad = _stats("j", [0, 1], 5)
    bad.collector_columns[0].recorded = b"\0" * 3
    with pytest.raises(BatchError, match="'recorded'"):
        hb.add(bad)
    assert hb.take() == {}
