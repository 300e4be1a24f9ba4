"""Communicator hashes in every source's spelling, op names, sizes; NCCL's per-type counters
turned into per-communicator sequence numbers."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.nccl.ids import bytes_from_msg, comm_hash, hash_text, msg_from_bytes, op_name
from diagnosis.nccl.seqmap import SeqMapper, launched_index

H = 0x58AECEBABB9E37AF


@pytest.mark.parametrize("spelling", [
    "0x58aecebabb9e37af",            # Inspector header.id, RAS JSON hash, NCCL_DEBUG commId
    "58aecebabb9e37af",              # RAS text: %016lx, no 0x
    "0x58AECEBABB9E37AF",
    "6390272222692259759",           # the example profiler's CommHash, as text
    6390272222692259759,             # ... and as the JSON number it is
])
def test_every_spelling_of_one_hash_is_one_communicator(spelling):
    assert comm_hash(spelling) == H
    assert hash_text(H) == "0x58aecebabb9e37af"


def test_short_hashes_keep_their_value_in_every_spelling():
    # the Inspector's "0x%lx" drops leading zeros that RAS text and CoMMA keep
    assert comm_hash("0x7f8c496ae9f661") == comm_hash("007f8c496ae9f661") == \
        comm_hash("0x007f8c496ae9f661") == 0x7F8C496AE9F661
    assert hash_text(0x7F8C496AE9F661) == "0x007f8c496ae9f661"


@pytest.mark.parametrize("bad", ["", "0x", "hello", "0xZZ", 1 << 64, -1, True, 1.5])
def test_what_is_not_a_hash_is_refused(bad):
    with pytest.raises(ValueError):
        comm_hash(bad)


@pytest.mark.parametrize(("name", "op"), [
    ("AllReduce", "all_reduce"), ("ReduceScatter", "reduce_scatter"), ("AllGatherV", "all_gather"),
    ("Send", "send"), ("all_gather", "all_gather"), ("ncclAllReduce", "all_reduce"),
    ("_REDUCE_SCATTER_BASE", "reduce_scatter"), ("ALLREDUCE", "all_reduce"), ("RECV", "recv"),
])
def test_op_names_of_every_source_become_torch_spelling(name, op):
    assert op_name(name) == op


def test_reduce_scatter_message_is_the_per_rank_chunk():
    assert bytes_from_msg("reduce_scatter", 65536, 32) == 65536 * 32
    assert msg_from_bytes("reduce_scatter", 65536 * 32, 32) == 65536
    assert bytes_from_msg("all_gather", 4096, 8) == 4096 == msg_from_bytes("all_gather", 4096, 8)


def _map(m, streams, rows):
    ops = ["all_gather", "reduce_scatter", "all_reduce", "send", "recv"]
    stream = np.asarray([r[0] for r in rows])
    op = np.asarray([ops.index(r[1]) for r in rows])
    sn = np.asarray([r[2] for r in rows])
    peer = np.asarray([r[3] if len(r) > 3 else -1 for r in rows])
    return m.map(streams, stream, ops, op, sn, peer)


def test_per_type_numbers_interleave_into_one_sequence_across_batches():
    # a sequence-parallel block: all_gather #k, reduce_scatter #k, ... on stream A; stream B
    # runs all-reduces only; rows of the two interleave and arrive in two batches
    m = SeqMapper()
    a = [("all_gather", 0), ("reduce_scatter", 0), ("all_gather", 1), ("reduce_scatter", 1),
         ("all_gather", 2)]
    rows = [row for i, (op, sn) in enumerate(a) for row in ((0, op, sn), (1, "all_reduce", i))]
    first = _map(m, ["A", "B"], rows[:5])
    second = _map(m, ["A", "B"], rows[5:])
    seq = np.r_[first.seq, second.seq].tolist()
    assert seq[0::2] == [0, 1, 2, 3, 4]         # A
    assert seq[1::2] == [0, 1, 2, 3, 4]         # B
    assert m.streams["A"].last == {"all_gather": 2, "reduce_scatter": 1}
    assert not m.streams["A"].gappy


def test_every_rank_numbers_a_call_alike_even_when_small_calls_were_left_out():
    # the Inspector leaves out calls under DUMP_MIN_SIZE_BYTES on every rank alike: the
    # numbers skip, the sequence stays the same on every member (not the true index)
    m = SeqMapper()
    rows = [("all_reduce", 0), ("all_gather", 0), ("all_reduce", 2), ("all_gather", 1)]
    seqs = []
    for s in (0, 1):
        seqs.append(_map(m, ["r0", "r1"], [(s, *r) for r in rows]).seq.tolist())
    assert seqs[0] == seqs[1] == [0, 1, 3, 4]
    assert m.streams["r0"].gappy == {"all_reduce"}


def test_a_line_read_twice_is_marked_as_a_repeat():
    m = SeqMapper()
    out = _map(m, ["A"], [(0, "all_reduce", 0), (0, "all_reduce", 1), (0, "all_reduce", 1)])
    assert out.dup.tolist() == [False, False, True]
    again = _map(m, ["A"], [(0, "all_reduce", 0)])
    assert again.dup.tolist() == [True]


def test_sends_and_receives_count_per_direction_and_peer():
    m = SeqMapper()
    out = _map(m, ["A"], [(0, "send", 1, 1), (0, "recv", 2, 1), (0, "send", 3, 1),
                          (0, "send", 4, 2), (0, "send", 5, 1)])
    assert out.seq.tolist() == [0, 0, 1, 0, 2]
    assert _map(m, ["A"], [(0, "send", 6, 1)]).seq.tolist() == [3]


def test_launch_counts_past_the_last_completion():
    last = {"all_gather": 4, "reduce_scatter": 4}
    # one all-gather launched past a frontier at seq 9: seq 10
    assert launched_index({"all_gather": 6, "reduce_scatter": 5}, last, 9) == 10
    # counts of a type whose numbers skipped say nothing about what is in flight
    assert launched_index({"all_gather": 9, "reduce_scatter": 5}, last, 9,
                          {"all_gather"}) == 9
    # no completion known: the index of the last call launched
    assert launched_index({"AllReduce": 6650}, None, -1) == 6649
