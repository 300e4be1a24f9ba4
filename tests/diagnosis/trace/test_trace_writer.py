"""The trace writer: every record kind of format versions 1 and 2 read back as written, optional
fields at their default left out of the file."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from diagnosis.engine import ConnRecords
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.trace import Meta, TraceWriter, read_trace


def _write(fn) -> tuple[list[dict], list]:
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        fn(w)
    text = buf.getvalue()
    lines = [json.loads(ln) for ln in text.splitlines()]
    return lines, list(read_trace(io.BytesIO(text), name="w.jsonl"))


def _only(items: list, cls: type):
    found = [i for i in items if isinstance(i, cls)]
    assert len(found) == 1
    return found[0]


def _strings(strings: list[str], col: np.ndarray) -> list[str | None]:
    return [strings[i] if i >= 0 else None for i in col.tolist()]


def test_meta_versions_and_sample():
    lines, items = _write(lambda w: (w.meta("j"), w.meta(version=2), w.meta("k", sample=16)))
    assert lines == [{"type": "meta", "version": 1, "job": "j"},
                     {"type": "meta", "version": 2},
                     {"type": "meta", "version": 2, "job": "k", "sample": 16}]
    assert items == [Meta(1, "j", 1), Meta(2, None, 1), Meta(2, "k", 16)]
    with pytest.raises(ValueError, match="version"):
        TraceWriter(io.BytesIO()).meta(version=3)
    with pytest.raises(ValueError, match="sample"):
        TraceWriter(io.BytesIO()).meta(sample=0)


def test_progress_records_round_trip():
    recs = ProgressRecords.build(rank=[0, 1, 2], pg=["dp.0", "pp.0", "dp.0"],
                                 t_ns=[10, 11, 12], entered=[4, 2, None],
                                 completed=[3, None, None], op=[None, "send", None],
                                 peer=[None, 0, None])
    lines, items = _write(lambda w: w.progress_records(recs))
    assert lines[2] == {"type": "progress", "rank": 2, "pg": "dp.0", "t_ns": 12}
    assert lines[1] == {"type": "progress", "rank": 1, "pg": "pp.0", "t_ns": 11, "entered": 2,
                        "op": "send", "peer": 0}
    back = _only(items, ProgressRecords)
    for name in ("rank", "peer", "t_ns", "entered", "completed"):
        assert getattr(back, name).tolist() == getattr(recs, name).tolist(), name
    assert _strings(back.strings, back.pg) == ["dp.0", "pp.0", "dp.0"]
    assert _strings(back.strings, back.op) == [None, "send", None]


def test_linkstat_records_round_trip():
    recs = LinkStatRecords.build(
        src=[0, 1], dst=[1, 0], t_ns=[2000, 2000], window_ns=[1000, 1000], pg=["dp.0", None],
        transfers=[3, 0], nbytes=[300, 0], busy_ns=[90, 0], max_ns=[40, 0], open_=[0, 2],
        open_since_ns=[None, 1200], retrans=[7, None],
        paths=[["a/nic0", "leaf0", "b/nic0"], None])
    lines, items = _write(lambda w: w.linkstat_records(recs))
    assert lines[1] == {"type": "linkstat", "src": 1, "dst": 0, "t_ns": 2000,
                        "window_ns": 1000, "open": 2, "open_since_ns": 1200}
    back = _only(items, LinkStatRecords)
    for name in ("src", "dst", "t_ns", "window_ns", "transfers", "bytes", "busy_ns", "max_ns",
                 "open", "open_since_ns", "retrans"):
        assert getattr(back, name).tolist() == getattr(recs, name).tolist(), name
    assert _strings(back.strings, back.pg) == ["dp.0", None]
    assert back.paths == [("a/nic0", "leaf0", "b/nic0"), None]


def test_port_records_round_trip():
    recs = PortRecords.build(["h0", "h1"], ["h0/nic0", "h1/nic0"], [5, 6], ["down", "up"],
                             link_downed=[2, None], rx_bytes=[0, 1 << 40])
    lines, items = _write(lambda w: w.port_records(recs))
    assert lines[0] == {"type": "port", "host": "h0", "nic": "h0/nic0", "t_ns": 5,
                        "state": "down", "link_downed": 2, "rx_bytes": 0}
    back = _only(items, PortRecords)
    assert _strings(back.strings, back.host) == ["h0", "h1"]
    assert _strings(back.strings, back.nic) == ["h0/nic0", "h1/nic0"]
    assert back.up.tolist() == [0, 1] and back.t_ns.tolist() == [5, 6]
    assert {k: v.tolist() for k, v in back.counters.items()} == \
        {"link_downed": [2, -1], "rx_bytes": [0, 1 << 40]}


def test_conn_retrans_round_trip():
    recs = ConnRecords.build([0, 1], [1, 0], [64, 64], [1, 2], [5, None], retrans=[3, -1])
    lines, items = _write(lambda w: w.conns(recs))
    assert lines[0]["retrans"] == 3 and "retrans" not in lines[1]
    assert _only(items, ConnRecords).retrans.tolist() == [3, -1]
    lines, items = _write(lambda w: w.conns(ConnRecords.build([0], [1], [8], [1])))
    assert "retrans" not in lines[0] and _only(items, ConnRecords).retrans is None


def test_single_record_methods_write_what_the_batch_methods_write():
    def one_by_one(w: TraceWriter) -> None:
        w.progress(0, "dp.0", 10, 4, 3)
        w.progress(1, "pp.0", 11, entered=2, op="send", peer=0)
        w.linkstat(0, 1, 2000, 1000, pg="dp.0", path=["a", "b"], transfers=3, nbytes=300,
                   busy_ns=90, max_ns=40, retrans=7)
        w.linkstat(1, 0, 2000, 1000, open_=2, open_since_ns=1200)
        w.port("h0", "h0/nic0", 5, "down", link_downed=2, rx_bytes=0)

    def batches(w: TraceWriter) -> None:
        w.progress_records(ProgressRecords.build([0, 1], ["dp.0", "pp.0"], [10, 11], [4, 2],
                                                 [3, None], [None, "send"], [None, 0]))
        w.linkstat_records(LinkStatRecords.build(
            [0, 1], [1, 0], [2000, 2000], [1000, 1000], pg=["dp.0", None], transfers=[3, 0],
            nbytes=[300, 0], busy_ns=[90, 0], max_ns=[40, 0], open_=[0, 2],
            open_since_ns=[None, 1200], retrans=[7, None], paths=[["a", "b"], None]))
        w.port_records(PortRecords.build(["h0"], ["h0/nic0"], [5], ["down"], link_downed=[2],
                                         rx_bytes=[0]))

    assert _write(one_by_one)[0] == _write(batches)[0]


def test_port_rejects_what_the_format_does_not_have():
    w = TraceWriter(io.BytesIO())
    with pytest.raises(ValueError, match="'up' or 'down'"):
        w.port("h", "h/nic0", 1, "sideways")
    with pytest.raises(ValueError, match="crc_errors"):
        w.port("h", "h/nic0", 1, "up", crc_errors=1)
