"""The accuracy bench's sparser traces: each --drop leaves out exactly its optional fields."""

from __future__ import annotations

import json

import pytest

from bench.accuracy.rewrite import parse_drops, rewrite
from diagnosis.trace import TraceWriter


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_drops_leave_out_only_their_fields(tmp_path):
    src = tmp_path / "t.jsonl"
    with TraceWriter(src) as w:
        w.rank(0, "node0", gpu="node0/gpu0", nic="node0/nic0")
        w.rank(1, "node1", gpu="node1/gpu0", nic="node1/nic0")
        w.group("pp", [0, 1])
        w.op(0, "pp", 0, "send", 1024, 10, 30, t_start_ns=12, peer=1)
        w.op(1, "pp", 0, "recv", 1024, 11, 30, t_start_ns=12, peer=0)
        w.end(100)
    dst = tmp_path / "sparse.jsonl"
    rewrite(src, dst, parse_drops("peer,placement,end"))
    before, after = _records(src), _records(dst)
    assert [r["type"] for r in after] == [r["type"] for r in before if r["type"] != "end"]
    assert all("peer" not in r and r["t_start_ns"] == 12 for r in after if r["type"] == "op")
    assert [sorted(r) for r in after if r["type"] == "rank"] == [["host", "rank", "type"]] * 2
    assert after[2] == before[2]


def test_unknown_drop_names_the_choices():
    with pytest.raises(ValueError, match="unknown --drop pier: choose from peer,"):
        parse_drops("pier")
