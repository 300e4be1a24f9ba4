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

from diagnosis.engine import Engine
from diagnosis.errors import DiagnosisError, FormatError
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
        w.conn(1, 0, 512, 320)
        w.end(1000)
    return buf.getvalue()


SEED = _seed()
SEED_LINES = [orjson.loads(ln) for ln in SEED.splitlines()]


def _read(data: bytes, block: int) -> list:
    try:
        return list(read_trace(io.BytesIO(data), block_bytes=block, name="fuzz.jsonl"))
    except FormatError as exc:
        assert "fuzz.jsonl" in str(exc)
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


@fuzz(40)
@given(st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(("meta", "rank", "group", "op", "conn", "end", "x"))},
    optional={k: json_values for k in ("rank", "pg", "seq", "op", "bytes", "t_enter_ns",
                                       "t_end_ns", "t_start_ns", "peer", "status", "src",
                                       "dst", "host", "ranks", "version", "t_ns", "path")}),
    max_size=12))
def test_made_up_records(records):
    _read("\n".join(json.dumps(o) for o in records).encode(), 4 << 20)
