"""``TraceJob`` as the ``keep`` of ``feed_trace``: every record once, also when the trace is
out of order and read a second time, sorted."""

from __future__ import annotations

import logging

from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace
from diagnosis.trace.job import TraceJob

T0 = 1_700_000_000_000_000_000


def _trace(path, shuffled: bool) -> None:
    # in order: call by call; shuffled: rank 1's whole log, then rank 0's, 20 s back in time
    rows = [(r, seq) for r in (1, 0) for seq in range(200)] if shuffled else \
        [(r, seq) for seq in range(200) for r in (0, 1)]
    with TraceWriter(path) as w:
        w.meta("kept")
        w.rank(0, "h0", "h0/gpu0")
        w.rank(1, "h1")
        w.group("0", [0, 1])
        for r, seq in rows:
            t = T0 + seq * 100_000_000 + r * 1000
            w.op(r, "0", seq, "all_reduce", 1024, t, t + 1_000_000)
        w.end(T0 + 30 * 10**9)


def test_keep_holds_every_record_once(tmp_path, caplog):
    for shuffled in (False, True):
        path = tmp_path / f"t{shuffled}.jsonl"
        _trace(path, shuffled)
        kept = TraceJob()
        with caplog.at_level(logging.WARNING):
            feed_trace(Engine(), path, keep=kept)
        assert ("sorting its records first" in caplog.text) == shuffled
        ops = kept.ops
        assert len(ops) == 400
        assert sorted(zip(ops["rank"].tolist(), ops["seq"].tolist())) == sorted(
            (r, s) for r in (0, 1) for s in range(200))
        assert kept.hosts == {0: "h0", 1: "h1"} and kept.gpus == {0: "h0/gpu0"}
        assert kept.job == "kept" and kept.end_ns == T0 + 30 * 10**9
        caplog.clear()
