"""Operation names as other recorders spell them (``Send``, ``nccl:recv``, ``AllReduce``) are the
operations c4's own collectors call ``send``, ``recv`` and ``all_reduce``."""

from __future__ import annotations

import pytest

from diagnosis.engine import Engine
from diagnosis.engine.hangs import is_symmetric, op_key
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace

MS = 1_000_000


@pytest.mark.parametrize("send,recv", [("send", "recv"), ("Send", "Recv"),
                                       ("nccl:send", "nccl:recv"), ("isend", "irecv")])
def test_pipeline_hang_is_found_whatever_the_spelling(tmp_path, send, recv):
    """Stages 0 > 1 > 2 in one communicator pass activations by send/recv; at the last step
    rank 2 never posts its receive, so rank 1 waits in its send."""
    path = tmp_path / "t.jsonl"
    t = 0
    with TraceWriter(path) as w:
        w.group("pp", [0, 1, 2])
        for step in range(40):
            for src, dst in ((0, 1), (1, 2)):
                t += 10 * MS
                if step == 39 and dst == 2:
                    w.op(src, "pp", step, send, 1 << 20, t, None, peer=dst)
                    break
                w.op(src, "pp", step, send, 1 << 20, t, t + 2 * MS, peer=dst)
                w.op(dst, "pp", step, recv, 1 << 20, t, t + 2 * MS, peer=src)
        w.end(t + 60_000 * MS)
    reports, _ = feed_trace(Engine(), path)
    assert [(r.kind, [s.rank for s in r.suspects]) for r in reports] == [("noncomm_hang", [2])]


def test_spellings_of_one_operation_share_a_key():
    assert op_key("AllReduce") == op_key("nccl:all_reduce") == op_key("all_reduce")
    assert is_symmetric("ReduceScatter") and is_symmetric("gloo:all_gather")
    assert not is_symmetric("Broadcast") and not is_symmetric("nccl:send")
