"""The trace reader: every record type, optional fields absent, chunked streaming, and malformed
input named by file, line and field."""

from __future__ import annotations

import numpy as np
import pytest

from c4.errors import FormatError
from c4.proto.codec import Columns
from diagnosis.engine import ConnRecords
from diagnosis.trace import End, GroupInfo, Meta, RankInfo, TraceWriter, read_trace


def _write_small(path):
    with TraceWriter(path) as w:
        w.meta("job1")
        w.rank(0, "node000", "node000/gpu0", "node000/nic0")
        w.rank(1, "node001")
        w.group("dp.0", [0, 1])
        w.op(0, "dp.0", 0, "all_reduce", 1024, 100, 200, dtype="float32")
        w.op(1, "dp.0", 0, "all_reduce", 1024, 150, 200)
        w.op(0, "dp.0", 1, "all_reduce", 1024, 300)                    # never completed
        w.op(1, "dp.0", 1, "all_reduce", 1024, 310, 400, status="error")
        w.op(0, "pp.0", 0, "send", 64, 500, 600, peer=1)
        w.conn(0, 1, 512, 160, 190, pg="dp.0", seq=0, path=["node000/nic0", "leaf0",
                                                             "node001/nic0"])
        w.conn(1, 0, 512, 320)                                           # not finished
        w.end(1000)


def test_round_trip_keeps_every_field_and_accepts_absent_optionals(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_small(path)
    items = list(read_trace(path))
    assert isinstance(items[0], Meta) and items[0].job == "job1"
    assert items[1] == RankInfo(0, "node000", "node000/gpu0", "node000/nic0")
    assert items[2] == RankInfo(1, "node001", None, None)
    assert items[3] == GroupInfo("dp.0", (0, 1))
    ops = [i for i in items if isinstance(i, Columns)]
    conns = [i for i in items if isinstance(i, ConnRecords)]
    assert isinstance(items[-1], End) and items[-1].t_ns == 1000
    assert len(ops) == 1 and len(conns) == 1
    c = ops[0]
    assert c["rank"].tolist() == [0, 1, 0, 1, 0]
    assert c["t_end_ns"].tolist() == [200, 200, -1, 400, 600]
    assert c["status"].tolist() == [0, 0, 0, 2, 0]
    assert c["peer"].tolist() == [-1, -1, -1, -1, 1]
    assert list(c.names("op")) == ["all_reduce"] * 4 + ["send"]
    assert list(c.names("pg")) == ["dp.0"] * 4 + ["pp.0"]
    assert c.names("dtype")[0] == "float32"
    k = conns[0]
    assert k.t_end_ns.tolist() == [190, -1]
    assert k.seq.tolist() == [0, -1]
    assert [k.strings[p] if p >= 0 else None for p in k.pg.tolist()] == ["dp.0", None]
    assert k.paths == [("node000/nic0", "leaf0", "node001/nic0"), None]


def test_small_blocks_stream_in_order(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.rank(0, "h0")
        w.group("g", [0])
        for s in range(500):
            w.op(0, "g", s, "all_reduce", 8, 10 * s, 10 * s + 5)
        w.group("late", [0])
        w.op(0, "late", 0, "barrier", 0, 9999, 10000)
    items = list(read_trace(path, block_bytes=2048))
    batches = [i for i in items if isinstance(i, Columns)]
    assert len(batches) > 3
    seqs = np.concatenate([b["seq"] for b in batches if b.names("pg")[0] == "g"])
    assert seqs.tolist() == list(range(500))
    # the group record comes out before the op that uses it
    kinds = [type(i).__name__ for i in items]
    assert kinds.index("GroupInfo", 2) < len(kinds) - 1
    assert items[-1].names("pg")[0] == "late"


@pytest.mark.parametrize(("line", "field", "words"), [
    ('{"type":"op","rank":0,"pg":"g","seq":1,"op":"all_reduce","t_enter_ns":5}', "bytes",
     "bytes"),
    ('{"type":"op","rank":"zero","pg":"g","seq":1,"op":"x","bytes":1,"t_enter_ns":5}', "rank",
     "integer"),
    ('{"type":"op","rank":0,"pg":"g","seq":1,"op":"x","bytes":1,"t_enter_ns":5,'
     '"status":"lost"}', "status", "ok, timeout, error"),
    ('{"type":"op","rank":0,"pg":"g","seq":1,"op":"x","bytes":1,"t_enter_ns":5,'
     '"t_end_ns":"soon"}', "t_end_ns", "integer"),
    ('{"type":"conn","src":0,"dst":1,"bytes":4,"t_start_ns":1,"path":"a-b"}', "path", "list"),
    ('{"type":"rank","rank":0}', "host", "host"),
    ('{"type":"group","pg":"g","ranks":[0,"1"]}', "ranks", "integers"),
    # an unknown type is skipped (test_trace_reader_v2), but a record must say its type
    ('{"type":7}', "type", "string 'type'"),
    ('{"type":null,"rank":0}', "type", "string 'type'"),
    ('{"type":["op"]}', "type", "string 'type'"),
    ('{"rank":0}', "type", "string 'type'"),
    ('{"type":"meta","version":3}', "version", "version 3"),
])
def test_malformed_line_names_file_line_and_field(tmp_path, line, field, words):
    path = tmp_path / "bad.jsonl"
    good = '{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}'
    path.write_text("\n".join([good, good, line, good]) + "\n")
    with pytest.raises(FormatError) as err:
        list(read_trace(path))
    assert err.value.line == 3
    assert err.value.field == field
    assert str(path) in str(err.value) and ":3" in str(err.value)
    assert words in str(err.value)


@pytest.mark.parametrize("block", [1, 64, 4 << 20])
def test_a_list_for_an_integer_is_an_error_in_a_block_of_any_size(tmp_path, block):
    """A block of one record made its column two-dimensional, which passed as integers (found
    by tests/fuzz/test_fuzz_trace.py)."""
    path = tmp_path / "bad.jsonl"
    good = '{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}'
    bad = '{"type":"op","rank":0,"pg":"g","seq":1,"op":"x","bytes":[0],"t_enter_ns":1}'
    path.write_text("\n".join([good, bad, good]) + "\n")
    with pytest.raises(FormatError) as err:
        list(read_trace(path, block_bytes=block))
    assert (err.value.line, err.value.field) == (2, "bytes")


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type":"end","t_ns":1}\n\n{"type": "end", t_ns: 2}\n')
    with pytest.raises(FormatError) as err:
        list(read_trace(path))
    assert err.value.line == 3
    assert "JSON" in str(err.value)


def test_gzip_trace_reads_like_plain(tmp_path):
    import gzip

    plain = tmp_path / "t.jsonl"
    _write_small(plain)
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    a = [type(i).__name__ for i in read_trace(plain)]
    b = [type(i).__name__ for i in read_trace(gz)]
    assert a == b and "Columns" in a


def test_parallel_parsing_gives_the_same_reports_and_names_bad_lines(tmp_path):
    from diagnosis.engine import Engine
    from diagnosis.trace.feed import feed_trace
    from diagnosis.trace.synth import SynthJob

    job = SynthJob(hosts=4, gpus_per_host=2, iterations=30, hang_rank=3)
    topo = job.topology()
    path = tmp_path / "t.jsonl"
    job.write(path, topo)
    seq, _ = feed_trace(Engine(topo), path, block_bytes=8192)
    par, stats = feed_trace(Engine(topo), path, block_bytes=8192, workers=1,
                            min_parallel_bytes=0)
    assert [r.to_json() for r in par] == [r.to_json() for r in seq]
    assert [r.kind for r in par] == ["noncomm_hang"] and stats.ops > 500
    lines = path.read_bytes().splitlines(keepends=True)
    bad = 600          # 0-based: line 601 of the file, in a later block
    lines[bad] = b'{"type":"op","rank":0,"pg":"tp.0","seq":"x","op":"all_reduce","bytes":1,' \
                 b'"t_enter_ns":1}\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(FormatError) as err:
        feed_trace(Engine(topo), path, block_bytes=8192, workers=1, min_parallel_bytes=0)
    assert (err.value.line, err.value.field) == (bad + 1, "seq")
    assert f":{bad + 1}" in str(err.value)
