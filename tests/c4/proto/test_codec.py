"""Columnar batches round-trip through protobuf without a per-record loop, and bad ones are
named precisely."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto import c4_pb2
from c4.proto.codec import (
    LINKSTAT_COLUMNS,
    OP_COLUMNS,
    PORT_COLUMNS,
    PROGRESS_COLUMNS,
    BatchError,
    Columns,
    concat,
    decode_linkstats,
    decode_ops,
    decode_ports,
    decode_progress,
    encode_linkstats,
    encode_ops,
    encode_ports,
    encode_progress,
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


# ----- reduced telemetry (trace format version 2) ------------------------------------------
def _reduced(spec: dict, n: int, strings: list[str], **fixed: np.ndarray) -> Columns:
    rng = np.random.default_rng(1)
    cols = {name: rng.integers(0, len(strings), n).astype(dt) for name, dt in spec.items()}
    cols.update(fixed)
    return Columns(cols, strings)


@pytest.mark.parametrize("spec, encode, decode, cls", [
    (PROGRESS_COLUMNS, encode_progress, decode_progress, c4_pb2.ProgressBatch),
    (LINKSTAT_COLUMNS, encode_linkstats, decode_linkstats, c4_pb2.LinkStatBatch),
    (PORT_COLUMNS, encode_ports, decode_ports, c4_pb2.PortBatch),
])
def test_reduced_batches_round_trip(spec, encode, decode, cls):
    n = 500
    fixed = {"window_ns": np.full(n, 10**9, np.int64)} if "window_ns" in spec else {}
    if "up" in spec:
        fixed["up"] = (np.arange(n) % 2).astype(np.uint8)
    cols = _reduced(spec, n, ["0", "send", "10.0.0.1:5"], **fixed)
    wire = encode("job", cols, attempt=3).SerializeToString()
    msg = cls.FromString(wire)
    assert (msg.job, msg.attempt, msg.count) == ("job", 3, n)
    back = decode(msg)
    for name, dt in spec.items():
        np.testing.assert_array_equal(back[name], cols[name])
        assert back[name].dtype == dt
    assert back.strings == cols.strings


def test_linkstat_bytes_column_travels_as_nbytes():
    cols = _reduced(LINKSTAT_COLUMNS, 3, ["a:1", "b:2"], window_ns=np.ones(3, np.int64),
                    bytes=np.array([5, 6, 7], np.int64))
    msg = encode_linkstats("j", cols)
    assert np.frombuffer(msg.nbytes, "<i8").tolist() == [5, 6, 7]
    assert decode_linkstats(msg)["bytes"].tolist() == [5, 6, 7]


@pytest.mark.parametrize("make, message", [
    (lambda: encode_progress("j", _reduced(PROGRESS_COLUMNS, 4, ["0"], pg=np.full(4, 3))),
     "'pg' points at string 3"),
    (lambda: encode_progress("j", _reduced(PROGRESS_COLUMNS, 4, ["0"], op=np.full(4, -2))),
     "'op' holds -2"),
    (lambda: encode_progress("j", _reduced(PROGRESS_COLUMNS, 4, ["0"], rank=np.full(4, -1))),
     "'rank' holds rank -1"),
    (lambda: encode_linkstats("j", _reduced(LINKSTAT_COLUMNS, 4, ["a:1"],
                                            window_ns=np.zeros(4, np.int64))),
     "'window_ns' holds a window of 0 ns"),
    (lambda: encode_ports("j", _reduced(PORT_COLUMNS, 4, ["h", "n"],
                                        up=np.full(4, 2, np.uint8))),
     "'up' holds a value other than 0"),
])
def test_bad_reduced_batches_are_named(make, message):
    msg = make()
    decode = {c4_pb2.ProgressBatch: decode_progress, c4_pb2.LinkStatBatch: decode_linkstats,
              c4_pb2.PortBatch: decode_ports}[type(msg)]
    with pytest.raises(BatchError, match=message):
        decode(msg)


def test_concat_keeps_minus_one_in_optional_string_columns():
    a = Columns({"pg": np.array([0], np.uint32), "op": np.array([-1], np.int32)}, ["x"])
    b = Columns({"pg": np.array([0, 1], np.uint32), "op": np.array([1, -1], np.int32)},
                ["y", "send"])
    out = concat([a, b])
    names = out.strings
    assert [names[i] for i in out["pg"].tolist()] == ["x", "y", "send"]
    assert out["op"].tolist()[0] == -1 and out["op"].tolist()[2] == -1
    assert names[out["op"][1]] == "send"


def test_control_rides_an_ack_that_old_sidecars_ignore():
    ack = c4_pb2.IngestAck(seq=0, control=c4_pb2.Control(schedule=c4_pb2.SampleSchedule(
        job="j", version=2, steps=[c4_pb2.SampleStep(pg="0", from_seq=100, sample=16)])))
    back = c4_pb2.IngestAck.FromString(ack.SerializeToString())
    assert back.HasField("control") and back.control.schedule.steps[0].sample == 16
    # an ack without a control message stays as it was on the wire
    assert not c4_pb2.IngestAck(seq=5).HasField("control")


def test_vectorised_sampling_is_the_crc32_rule():
    from c4.proto.sampling import is_sampled, prefix_state, sampled_after, sampled_seqs

    rng = np.random.default_rng(0)
    seqs = np.concatenate([np.arange(0, 3000), rng.integers(0, 10**15, 3000),
                           np.array([9, 10, 99, 100, 10**9 - 1, 10**9])])
    for pg, k in (("0", 2), ("tp.17", 16), ("dp:3", 64), ("", 3)):
        want = np.array([is_sampled(pg, int(s), k) for s in seqs])
        np.testing.assert_array_equal(sampled_seqs(pg, seqs, k), want)
    pgs = ["a", "bb", "c.9"]
    which = rng.integers(0, 3, len(seqs))
    states = np.array([prefix_state(p) for p in pgs], dtype=np.uint32)[which]
    want = np.array([is_sampled(pgs[w], int(s), 8) for w, s in zip(which, seqs)])
    np.testing.assert_array_equal(sampled_after(states, seqs, 8), want)


def test_collector_counters_read_the_same_per_rank_or_as_columns():
    from c4.proto.codec import collector_columns, collector_counts

    entries = [c4_pb2.CollectorStats(job="a", attempt=1, rank=r, recorded=10 * r, dropped=r,
                                     shipped=2 * r, t_ns=1000 + r, leaving=r == 2)
               for r in range(4)] + [c4_pb2.CollectorStats(job="b", rank=7, t_ns=5)]
    per_rank = collector_counts(c4_pb2.SidecarStats(collectors=entries))
    columns = collector_counts(c4_pb2.SidecarStats.FromString(c4_pb2.SidecarStats(
        collector_columns=collector_columns(entries)).SerializeToString()))
    assert [(j, a) for j, a, _ in columns] == [("a", 1), ("b", 0)]
    for (_, _, x), (_, _, y) in zip(per_rank, columns, strict=True):
        assert x.columns.keys() == y.columns.keys()
        for name in x.columns:
            assert x[name].tolist() == y[name].tolist(), name
    assert columns[0][2]["leaving"].tolist() == [0, 0, 1, 0]
    with pytest.raises(BatchError, match="CollectorStats column 'rank' holds rank -3"):
        collector_counts(c4_pb2.SidecarStats(collectors=[c4_pb2.CollectorStats(rank=-3)]))
