"""The streaming API: what goes out when, and what it is made of."""

from __future__ import annotations

import pytest

from c4.reduce import EdgeReducer
from tests.support.reduce_ops import ops, progress

S = ["all_reduce", "tp.0"]


def _row(seq: int, t: int, rank: int = 0) -> dict:
    return {"rank": rank, "pg": "tp.0", "seq": seq, "op": "all_reduce", "t_enter_ns": t,
            "t_end_ns": t + 1}


def test_progress_counts_every_call_though_few_are_shipped():
    red = EdgeReducer(sample=1_000_000, window_ns=100)
    kept = red.add_ops(ops([_row(s, 10 * s) for s in range(1, 9)], S))
    assert len(kept) == 0
    assert progress(red.flush(100)) == [{"rank": 0, "pg": "tp.0", "t_ns": 100, "entered": 8,
                                         "completed": 8}]


def test_windows_close_only_when_the_watermark_passes_their_end():
    red = EdgeReducer(window_ns=100)
    red.add_ops(ops([_row(0, 10), _row(1, 150)], S))
    assert progress(red.advance(99)) == []
    assert [r["t_ns"] for r in progress(red.advance(100))] == [100]
    assert progress(red.advance(50)) == []          # a watermark going back changes nothing
    assert [r["t_ns"] for r in progress(red.advance(250))] == [200]


def test_flush_ends_the_stream():
    red = EdgeReducer(window_ns=100)
    red.flush(10)
    with pytest.raises(RuntimeError, match="flushed"):
        red.add_ops(ops([_row(0, 10)], S))
    with pytest.raises(ValueError, match="at least 1"):
        EdgeReducer(sample=0)
    with pytest.raises(ValueError, match="positive"):
        EdgeReducer(window_ns=0)


def test_output_string_table_names_pg_and_direction():
    red = EdgeReducer(window_ns=100)
    red.add_ops(ops([_row(0, 10)], S))
    out = red.flush(100)
    assert out.progress.strings[out.progress["pg"][0]] == "tp.0"
    assert out.progress.strings is out.linkstat.strings or \
        out.progress.strings == out.linkstat.strings
