"""Columnar batches round-trip through protobuf without a per-record loop, and bad ones are
named precisely."""

from __future__ import annotations

import numpy as np
import pytest

from proto import c4_pb2
from proto.codec import (
    OP_COLUMNS,
    BatchError,
    Columns,
    concat,
    decode_ops,
    encode_ops,
)


def _cols(n: int, strings: list[str], seed: int = 0) -> Columns:
    rng = np.random.default_rng(seed)
    cols = {name: rng.integers(0, 3, n).astype(dt) for name, dt in OP_COLUMNS.items()}
    cols["t_end_ns"] = np.full(n, -1, np.int64)
    return Columns(cols, strings, {1: "boom"} if n > 1 else {})


def test_round_trip_through_bytes():
    cols = _cols(1000, ["0", "all_reduce", "float32"])
    wire = encode_ops("job", cols, attempt=2).SerializeToString()
    back = decode_ops(c4_pb2.OpBatch.FromString(wire))
    for name in OP_COLUMNS:
        np.testing.assert_array_equal(back[name], cols[name])
        assert back[name].dtype == OP_COLUMNS[name]
    assert back.strings == cols.strings and back.error_text == {1: "boom"}


@pytest.mark.parametrize("mutate, field", [
    (lambda m: setattr(m, "rank", m.rank[:-1]), "'rank'"),
    (lambda m: setattr(m, "count", m.count + 1), "bytes"),
    (lambda m: m.strings.pop(), "strings"),
    (lambda m: setattr(m, "status", b"\x07" * m.count), "'status'"),
    (lambda m: m.error_text.__setitem__(999, "x"), "error_text"),
])
def test_malformed_batches_are_named(mutate, field):
    msg = encode_ops("job", _cols(10, ["0", "all_reduce", "float32"]))
    mutate(msg)
    with pytest.raises(BatchError, match=field):
        decode_ops(msg)


def test_concat_merges_string_tables():
    a = _cols(5, ["0", "all_reduce", "float32"], seed=1)
    b = _cols(4, ["float32", "0", "all_reduce"], seed=2)
    joined = concat([a, b])
    assert len(joined) == 9
    assert joined.names("op").tolist() == a.names("op").tolist() + b.names("op").tolist()
    assert joined.error_text == {1: "boom", 6: "boom"}
