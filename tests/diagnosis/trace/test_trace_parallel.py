"""Parser processes that read their own blocks of a trace file (diagnosis.trace.parallel): the file
is cut where the one-process reader cuts it, the items and the detectors' cadence are those of
the reader that sends the blocks to the workers, and the lines that workers name (bad records,
unknown types, a line too long) are numbered as in the file, whichever block they are in."""

from __future__ import annotations

import dataclasses
import io
import logging

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from c4.errors import FormatError
from c4.proto.codec import Columns
from diagnosis.trace import read_trace
from diagnosis.trace.parallel import FileBlocks, read_blocks_parallel
from diagnosis.trace.reader import block_lines, block_spans, read_blocks
from diagnosis.trace.synth import SynthJob
from tests.support.v2trace import to_v2


def _read_blocks_spans(data: bytes, block_bytes: int, max_line_bytes: int) -> list[tuple[int, int]]:
    spans, start = [], 0
    for block, _, _ in read_blocks(io.BytesIO(data), block_bytes, "t", max_line_bytes):
        spans.append((start, start + len(block)))
        start += len(block)
    return spans


@given(lines=st.lists(st.integers(0, 40), max_size=30), block_bytes=st.integers(1, 64),
       newline_at_end=st.booleans())
def test_block_spans_cut_where_read_blocks_does(lines, block_bytes, newline_at_end):
    data = b"\n".join(b"x" * n for n in lines) + (b"\n" if newline_at_end and lines else b"")
    spans = list(block_spans(io.BytesIO(data), block_bytes, max_line_bytes=1000))
    assert spans == _read_blocks_spans(data, block_bytes, 1000)
    assert b"".join(data[a:b] for a, b in spans) == data


def test_block_spans_end_at_a_line_too_long_which_block_lines_names():
    data = b"a\nbb\n" + b"x" * 50 + b"\nc\n"
    spans = list(block_spans(io.BytesIO(data), 4, max_line_bytes=20))
    # the block with the long line is the last cut; its lines are not read further
    assert spans[-1][1] < len(data) and len(spans) == 2
    with pytest.raises(FormatError, match="longer than") as err:
        block_lines(data[slice(*spans[-1])], 3, "t.jsonl", max_line_bytes=20)
    assert err.value.line == 3
    with pytest.raises(FormatError) as ref:
        list(read_blocks(io.BytesIO(data), 4, "t.jsonl", max_line_bytes=20))
    assert ref.value.line == err.value.line


@pytest.fixture(scope="module")
def v2_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("v2")
    job = SynthJob(hosts=4, gpus_per_host=2, iterations=12)
    job.write(d / "v1.jsonl", job.topology())
    to_v2(d / "v1.jsonl", d / "v2.jsonl", sample=4)
    return d / "v2.jsonl"


def _fields(item) -> dict:
    if isinstance(item, Columns):
        return {"strings": item.strings, **item.columns}
    return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}


def _assert_same(u, v) -> None:
    if isinstance(u, np.ndarray):
        assert u.dtype == v.dtype and np.array_equal(u, v)
    elif isinstance(u, dict):
        assert u.keys() == v.keys()
        for k in u:
            _assert_same(u[k], v[k])
    else:
        assert u == v


def _assert_same_items(a: list, b: list) -> None:
    assert [type(i) for i in a] == [type(i) for i in b]
    for x, y in zip(a, b, strict=True):
        fx, fy = _fields(x), _fields(y)
        assert fx.keys() == fy.keys()
        for name, u in fx.items():
            _assert_same(u, fy[name])


@pytest.mark.parametrize("workers", [1, 2])
def test_file_blocks_give_the_items_of_one_process_at_its_offsets(v2_trace, workers):
    block_bytes = 4096
    one = list(read_trace(v2_trace, block_bytes=block_bytes))
    blocks = FileBlocks(v2_trace, workers, block_bytes)
    items, where = [], []
    for item in blocks:
        items.append(item)
        where.append(blocks.pos)
    _assert_same_items(items, one)
    # reading is said to have got where the reader that reads the file in this process and
    # sends its blocks to the workers has got when it hands out that item (the detectors'
    # cadence, and so the reports, stay that reader's)
    ref = []
    with open(v2_trace, "rb") as fh:
        for _ in read_blocks_parallel(fh, str(v2_trace), workers, block_bytes):
            ref.append(fh.tell())
    assert where == ref and where[-1] == v2_trace.stat().st_size
    assert len(set(where)) > 8


def test_file_blocks_number_the_lines_of_later_blocks(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    op = b'{"type":"op","rank":0,"pg":"g","seq":%d,"op":"x","bytes":1,"t_enter_ns":%d}\n'
    lines = [op % (i, i + 1) for i in range(400)]
    lines[250] = b'{"type":"gpu_temp","rank":0,"celsius":71}\n'
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    items = list(FileBlocks(path, 1, block_bytes=1024))
    assert sum(len(i) for i in items) == 399
    warned = [r.getMessage() for r in caplog.records if "unknown type" in r.getMessage()]
    assert len(warned) == 1 and f"{path}:251:" in warned[0]

    lines[250] = op % (250, 251)
    lines[330] = b'{"type":"op","rank":0,"pg":"g","seq":-3,"op":"x","bytes":1,"t_enter_ns":5}\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(FormatError) as err:
        list(FileBlocks(path, 2, block_bytes=1024))
    assert (err.value.line, err.value.field) == (331, "seq")
    assert str(err.value).startswith(f"{path}:331 (field 'seq'):")


def test_file_blocks_name_a_line_too_long(tmp_path):
    path = tmp_path / "t.jsonl"
    good = b'{"type":"op","rank":0,"pg":"g","seq":0,"op":"x","bytes":1,"t_enter_ns":1}\n'
    with path.open("wb") as fh:
        fh.write(good * 3000)
        fh.write(b'{"type":"op","pad":"' + b"x" * (17 << 20) + b'"}\n')
        fh.write(good)
    with pytest.raises(FormatError, match="longer than 16 MiB") as err:
        list(FileBlocks(path, 1, block_bytes=64 << 10))
    assert err.value.line == 3001
