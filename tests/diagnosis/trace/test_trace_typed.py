"""The reader's typed fast path (diagnosis.trace.typed): a block of telemetry lines decoded into
structs gives exactly the batches the general path (dicts) gives, and a block it does not take
goes to the general path, which names the bad line and field."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from c4.errors import FormatError
from c4.proto.codec import Columns
from diagnosis.engine.records import PORT_COUNTERS
from diagnosis.trace import TraceWriter, read_trace, reader
from diagnosis.trace.reader import _block, parse_block, read_blocks
from diagnosis.trace.reader_v2 import LINK_COUNTS
from diagnosis.trace.typed import decode_block
from tests.fuzz.fuzzkit import fuzz


def _general(data: bytes) -> list:
    return list(_block(io.BytesIO(data).readlines(), 1, "t.jsonl"))


def _fast(data: bytes) -> list:
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    return list(parse_block(data, 1, lines, "t.jsonl"))


def _outcome(read, data: bytes):
    try:
        return read(data)
    except FormatError as exc:
        return ("error", str(exc), exc.line, exc.field)


def _same(a, b) -> None:
    """Items equal field by field, numpy columns by dtype and values."""
    if isinstance(a, tuple) and a and a[0] == "error":
        assert a == b
        return
    assert [type(i) for i in a] == [type(i) for i in b]
    for x, y in zip(a, b):
        if isinstance(x, Columns):
            assert x.strings == y.strings
            assert x.columns.keys() == y.columns.keys()
            for name in x.columns:
                _same_array(x.columns[name], y.columns[name])
            continue
        for f in dataclasses.fields(x):
            u, v = getattr(x, f.name), getattr(y, f.name)
            if isinstance(u, np.ndarray):
                _same_array(u, v)
            elif isinstance(u, dict):
                assert u.keys() == v.keys()
                for k in u:
                    _same_array(u[k], v[k])
            else:
                assert u == v, f.name


def _same_array(u: np.ndarray, v: np.ndarray) -> None:
    assert u.dtype == v.dtype and u.shape == v.shape and (u == v).all()


# ----- records of every kind, right and (now and then) wrong ------------------------------
_names = st.sampled_from(["dp.0", "tp.12", "pp.3", "node007/nic1", "leaf00r1", "world", "é",
                          "", "a b", "x\"y"])
_ints = st.integers(0, 2**63 - 1) | st.integers(-5, 5) | st.sampled_from([2**63, 2**64])
_wrong = st.sampled_from([True, False, 1.0, "7", None, [1], {"a": 1}, -1, 2**63])


def _value(kind: str, draw) -> object:
    if draw(st.integers(0, 30)) == 0:
        return draw(_wrong)
    if kind == "int":
        return draw(_ints)
    if kind == "path":
        return draw(st.lists(_names, max_size=5))
    return draw(_names)


_KINDS = {
    "op": ({"rank": "int", "pg": "str", "seq": "int", "op": "str", "bytes": "int",
            "t_enter_ns": "int"},
           {"t_start_ns": "int", "t_end_ns": "int", "peer": "int", "status": "status",
            "dtype": "str"}),
    "conn": ({"src": "int", "dst": "int", "bytes": "int", "t_start_ns": "int"},
             {"t_end_ns": "int", "pg": "str", "seq": "int", "path": "path", "retrans": "int"}),
    "progress": ({"rank": "int", "pg": "str", "t_ns": "int"},
                 {"entered": "int", "completed": "int", "op": "str", "peer": "int"}),
    "linkstat": ({"src": "int", "dst": "int", "t_ns": "int", "window_ns": "int"},
                 {"pg": "str", "path": "path", **dict.fromkeys(LINK_COUNTS, "int"),
                  "open_since_ns": "int", "retrans": "int"}),
    "port": ({"host": "str", "nic": "str", "t_ns": "int", "state": "state"},
             dict.fromkeys(PORT_COUNTERS, "int")),
}


@st.composite
def _record(draw, kinds=tuple(_KINDS)) -> dict:
    kind = draw(st.sampled_from(kinds))
    required, optional = _KINDS[kind]
    rec: dict = {"type": kind}
    for name, what in required.items():
        if draw(st.integers(0, 40)):                 # now and then a required field is missing
            rec[name] = _typed(what, draw)
    for name, what in optional.items():
        if draw(st.booleans()):
            rec[name] = None if draw(st.integers(0, 5)) == 0 else _typed(what, draw)
    if draw(st.integers(0, 40)) == 0:
        rec["mine"] = draw(st.integers())            # a field the format does not name
    keys = list(rec)
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    return {k: rec[k] for k in keys}


def _typed(what: str, draw) -> object:
    if what == "status":
        return draw(st.sampled_from(["ok", "ok", "timeout", "error", "lost"]))
    if what == "state":
        return draw(st.sampled_from(["up", "down", "sideways"]))
    return _value(what, draw)


def _lines(recs: list[dict], spaced: bool) -> bytes:
    seps = (", ", ": ") if spaced else (",", ":")
    return b"".join(json.dumps(r, separators=seps, ensure_ascii=False).encode() + b"\n"
                    for r in recs)


@fuzz(300)
@given(st.lists(_record(), min_size=1, max_size=30), st.booleans())
def test_typed_blocks_read_as_the_general_path_reads_them(recs, spaced):
    data = _lines(recs, spaced)
    _same(_outcome(_fast, data), _outcome(_general, data))


@fuzz(150)
@given(st.lists(_record(("op", "progress")), min_size=1, max_size=30))
def test_every_block_size_gives_the_same_rows_or_an_error(recs):
    """(Which bad line a block names first may depend on the block: one batch per kind is
    checked at a time.)"""
    data = _lines(recs, False)

    def read(block: int):
        try:
            items = list(read_trace(io.BytesIO(data), block_bytes=block, name="t.jsonl"))
        except FormatError:
            return "error"
        return {type(i).__name__: sum(len(j) for j in items if type(j) is type(i))
                for i in items}

    assert read(1) == read(64) == read(4 << 20)


# ----- which path a block takes ---------------------------------------------------------------
def _telemetry() -> bytes:
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        for seq in range(50):
            w.op(0, "dp.0", seq, "all_reduce", 1024, 100 + seq, 150 + seq, dtype="bfloat16")
            w.op(1, "pp.0", seq, "send", 64, 100 + seq, 160 + seq, peer=3, status="timeout")
            w.conn(0, 1, 512, 160, 190, pg="dp.0", seq=seq, path=["n0/nic0", "leaf0"])
            w.progress(0, "dp.0", 700 + seq, seq, seq - 1 if seq else None)
            w.linkstat(0, 1, 800 + seq, 100, pg="dp.0", path=["n0/nic0", "leaf0"],
                       transfers=2, nbytes=1024, busy_ns=60, max_ns=40, retrans=1)
            w.port("n0", "n0/nic0", 900 + seq, "up" if seq % 2 else "down", link_downed=seq)
    return buf.getvalue()


def test_writer_output_takes_the_typed_path(monkeypatch):
    data = _telemetry()
    expected = _general(data)

    def no_general(*args, **kwargs):
        raise AssertionError("the block went to the general path")

    monkeypatch.setattr(reader, "_block", no_general)
    got = list(read_trace(io.BytesIO(data), name="t.jsonl"))
    assert [type(i).__name__ for i in got] == ["Columns", "ConnRecords", "ProgressRecords",
                                               "LinkStatRecords", "PortRecords"]
    _same(got, expected)


def test_fields_the_format_does_not_name_are_skipped_on_the_typed_path():
    good = b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}\n'
    extra = (b'{"type":"op","rank":1,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":2,'
             b'"job":"j7","mine":{"a":[1,null]}}\n')
    data = good + extra
    assert decode_block(data, 2) is not None
    got = _fast(data)
    _same(got, _general(data))
    assert got[0].columns["rank"].tolist() == [0, 1]


@pytest.mark.parametrize("line", [
    b'{"type":"rank","rank":0,"host":"h"}',
    b'{"type":"gpu_temp","rank":0}',
    b'{"type":"op","rank":0,"pg":"g\\u0041","seq":0,"op":"x","bytes":1,"t_enter_ns":1}',
    b'',
    b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1},{"type":"x"}',
    b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1.0}',
])
def test_blocks_the_typed_path_leaves_to_the_general_one(line):
    good = b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}\n'
    data = good + line + b"\n" + good
    assert decode_block(data, 3) is None
    _same(_outcome(_fast, data), _outcome(_general, data))


def test_a_batch_the_builders_refuse_is_named_by_the_general_path():
    """Typed, but not a batch: rank -1, t_end_ns past int64."""
    good = '{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}'
    for line, field in (
            ('{"type":"op","rank":-1,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}', "rank"),
            ('{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1,'
             '"t_end_ns":9223372036854775808}', "t_end_ns")):
        data = f"{good}\n{line}\n".encode()
        assert decode_block(data, 2) is not None
        with pytest.raises(FormatError) as err:
            _fast(data)
        assert (err.value.line, err.value.field) == (2, field)


def test_read_blocks_cut_at_whole_lines_and_count_them():
    data = b"a\nbb\n\nccc\nlast"
    blocks = list(read_blocks(io.BytesIO(data), 3))
    assert b"".join(b for b, _, _ in blocks) == data
    assert all(b.endswith(b"\n") for b, _, _ in blocks[:-1])
    assert [(first, n) for _, first, n in blocks] == [(1, 2), (3, 2), (5, 1)]
