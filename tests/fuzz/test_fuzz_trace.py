"""Fuzz the trace reader (and the engine behind ``c4 analyze``) with mutated and made-up traces:
the only acceptable outcomes are records or a FormatError naming the file and line."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile

import orjson
from hypothesis import given
from hypothesis import strategies as st

from c4.errors import FormatError
from diagnosis.engine import Engine
from diagnosis.errors import DiagnosisError
from diagnosis.trace import TraceWriter, read_trace
from diagnosis.trace.feed import feed_trace
from tests.fuzz.fuzzkit import fuzz, json_values, mutate, mutate_json


def _seed() -> bytes:
    buf = io.BytesIO()
    with TraceWriter(buf) as w:
        w.meta("job1")
        w.rank(0, "node000", "node000/gpu0", "node000/nic0")
        w.rank(1, "node001")
        w.group("dp.0", [0, 1])
        for seq in range(3):
            w.op(0, "dp.0", seq, "all_reduce", 1024, 100 + seq * 100, 150 + seq * 100,
                 dtype="float32")
            w.op(1, "dp.0", seq, "all_reduce", 1024, 110 + seq * 100, 150 + seq * 100)
        w.op(0, "pp.0", 0, "send", 64, 500, 600, peer=1)
        w.op(1, "pp.0", 0, "recv", 64, 500, 610, peer=0, status="timeout")
        w.conn(0, 1, 512, 160, 190, pg="dp.0", seq=0, path=["node000/nic0", "leaf0"])
        w.conn(1, 0, 512, 320, retrans=3)
        # a version 2 part, as when traces are joined together
        w.meta("job1", sample=3)
        w.progress(0, "dp.0", 700, 2, 2)
        w.progress(1, "pp.0", 710, 0, op="recv", peer=0)
        w.linkstat(0, 1, 800, 100, pg="dp.0", path=["node000/nic0", "leaf0"], transfers=2,
                   nbytes=1024, busy_ns=60, max_ns=40, retrans=1)
        w.linkstat(1, 0, 800, 100, open_=1, open_since_ns=750)
        w.port("node000", "node000/nic0", 900, "down", link_downed=1, symbol_errors=4)
        w.port("node001", "node001/nic0", 900, "up", rx_bytes=1 << 30)
        w.end(1000)
    return buf.getvalue()


SEED = _seed()
SEED_LINES = [orjson.loads(ln) for ln in SEED.splitlines()]


def _read(data: bytes, block: int) -> list:
    try:
        return list(read_trace(io.BytesIO(data), block_bytes=block, name="fuzz.jsonl"))
    except FormatError as exc:
        assert "fuzz.jsonl" in str(exc)
        # the slow path finds whatever failed the fast one: a line, and for a record a field
        assert exc.line is not None and "records in this block" not in str(exc), str(exc)
        return []


def _analyze(data: bytes) -> None:
    """What ``c4 analyze`` does with a trace: the engine must take it or say why not."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as fh:
        fh.write(data)
        fh.flush()
        with contextlib.suppress(DiagnosisError):
            feed_trace(Engine(None), fh.name, block_bytes=256)


@fuzz(250)
@given(st.data())
def test_mutated_bytes(data):
    _read(mutate(SEED, data.draw), data.draw(st.sampled_from((1, 64, 4 << 20))))


@fuzz(150)
@given(st.data())
def test_mutated_records(data):
    lines = [mutate_json(o, data.draw, edits=1) if data.draw(st.integers(0, 4)) == 0 else o
             for o in SEED_LINES]
    # the standard library writes what orjson refuses (integers past 64 bits, NaN)
    text = "\n".join(json.dumps(o) for o in lines).encode() + b"\n"
    if _read(text, data.draw(st.sampled_from((1, 200, 4 << 20)))):
        _analyze(text)


FIELDS = ("rank", "pg", "seq", "op", "bytes", "t_enter_ns", "t_end_ns", "t_start_ns", "peer",
          "status", "src", "dst", "host", "ranks", "version", "t_ns", "path", "sample",
          "entered", "completed", "window_ns", "transfers", "busy_ns", "max_ns", "open",
          "open_since_ns", "retrans", "nic", "state", "link_downed", "rx_bytes")
TYPES = ("meta", "rank", "group", "op", "conn", "progress", "linkstat", "port", "end", "x")


@fuzz(40)
@given(st.lists(st.fixed_dictionaries({"type": st.sampled_from(TYPES)},
                                      optional={k: json_values for k in FIELDS}),
                max_size=12))
def test_made_up_records(records):
    _read("\n".join(json.dumps(o) for o in records).encode(), 4 << 20)


# values a field may plausibly hold, right or wrong: the engine sees the ones the reader takes
_plausible = (st.integers(-2, 5) | st.integers(0, 2**63 - 1) | st.none()
              | st.sampled_from(("up", "down", "dp.0", "node000/nic0", "send")))


@fuzz(60)
@given(st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(("progress", "linkstat", "port", "conn"))},
    optional={k: _plausible for k in FIELDS}), max_size=10))
def test_made_up_v2_records_through_the_engine(records):
    text = b"".join(orjson.dumps(o) + b"\n" for o in records)
    if _read(SEED + text, 4 << 20):
        _analyze(SEED + text)
