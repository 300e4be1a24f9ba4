"""The Inspector reader's typed path (msgspec structs): a plain block gives exactly the rows of
the JSON path, and every block that is not plain is refused, so that the slower paths read it
and name its bad line."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import orjson
import pytest

from diagnosis.nccl.inspector import parse_block, parse_lines, read_inspector_file
from diagnosis.nccl.inspector_typed import decode_block
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import CommKey, NcclOps
from tests.diagnosis.nccl.support import fixture
from tests.diagnosis.nccl.test_nccl_inspector import LINE, P2P, _same


def _compact(name):
    return orjson.dumps(orjson.loads(fixture(name).read_bytes()))


def _block(lines):
    return b"\n".join(lines) + b"\n"


def test_plain_blocks_give_the_json_paths_rows():
    verbose = _compact("inspector_readme_coll_perf_verbose.json")
    other_proc = LINE.replace(b'"pid":77', b'"pid":78').replace(b'"node1"', b'"node2"')
    other_comm = LINE.replace(b'"0x7f8c496ae9f661"', b'"0x11"').replace(b'"rank":2', b'"rank":0')
    float_time = LINE.replace(b'"coll_exec_time_us":61974', b'"coll_exec_time_us":61974.6')
    no_time = LINE.replace(b'"coll_exec_time_us":61974,', b"")
    null_trace = LINE.replace(b'"coll_busbw_gbs":485.119099',
                              b'"coll_busbw_gbs":485.119099,"event_trace_ts":null')
    lines = [_compact("inspector_readme_coll_perf.json"), verbose,
             _compact("inspector_exporter_readme_coll_perf.json"), LINE, P2P, other_proc,
             other_comm, float_time, no_time, P2P.replace(b'"Send"', b'"Recv"'), null_trace]
    block = _block(lines)
    typed = decode_block(block, 7, "f")
    assert typed is not None                        # the typed path read it
    _same(typed.ops, parse_lines(lines, 7, "f"))
    ops = typed.ops
    assert ops.exec_us.tolist()[7:9] == [61975, -1]   # rounded as the JSON path; absent: -1
    assert ops.line.tolist() == list(range(7, 18))
    assert ops.kstop_us.tolist()[1] == 1752867229275811
    assert {ops.comms[i] for i in ops.comm.tolist()} >= {
        CommKey(0x7F8C496AE9F661, 2, 8, 1, "DP Group 0"), CommKey(0x11, 0, 8, 1, "DP Group 0")}
    assert len(ops.procs) == 5
    # the "nan" strings of both point-to-point lines' two bandwidths, the first one's line
    assert (typed.nan, typed.nan_line) == (4, 4)


def test_one_id_under_several_headers_is_several_communicators():
    # a process with two ranks in one communicator; the same id with and without a name
    lines = [LINE, LINE.replace(b'"rank":2', b'"rank":3'),
             LINE.replace(b'"comm_name":"DP Group 0",', b""), LINE]
    typed = decode_block(_block(lines), 1, "f")
    assert typed is not None
    _same(typed.ops, parse_lines(lines, 1, "f"))
    assert typed.ops.comm.tolist() == [0, 1, 2, 0]
    assert [(c.rank, c.name) for c in typed.ops.comms] == [
        (2, "DP Group 0"), (3, "DP Group 0"), (2, None)]


def test_one_header_spelt_two_ways_is_one_communicator():
    # the typed path groups lines by their header's bytes: keys in another order are the
    # same header
    head = LINE.split(b',"metadata"')[0][len(b'{"header":'):]
    obj = orjson.loads(head)
    reordered = orjson.dumps(dict(reversed(list(obj.items()))))
    assert reordered != head
    lines = [LINE, LINE.replace(head, reordered), LINE]
    typed = decode_block(_block(lines), 1, "f")
    assert typed is not None
    _same(typed.ops, parse_lines(lines, 1, "f"))
    assert typed.ops.comm.tolist() == [0, 0, 0] and len(typed.ops.comms) == 1


@pytest.mark.parametrize("why, lines", [
    ("a blank line", [LINE, b"", LINE]),
    ("a line of spaces", [LINE, b"   ", LINE]),
    ("an escape", [LINE.replace(b'"DP Group 0"', b'"DP \\"G\\" 0"')]),
    ("a line cut short", [LINE, LINE[:120], LINE]),
    ("two records on one line", [LINE + LINE, LINE]),
    ("a dump_stats marker", [LINE, b'{"header":{"id":"0x1","rank":0,"n_ranks":2},"metadata":'
                             b'{"dump_timestamp_us":5,"hostname":"h","pid":9},"dump_stats":'
                             b'{"coll_dropped_since_last_dump":7}}']),
    ("a v4.3 line without header", [LINE, b'{"coll_perf":{"coll":"AllGather","coll_sn":1,'
                                    b'"coll_msg_size_bytes":4096,"coll_exec_time_us":3}}']),
    ("neither payload", [LINE, LINE.split(b',"coll_perf"')[0] + b"}"]),
    ("a negative number", [LINE.replace(b'"coll_sn":1407', b'"coll_sn":-1')]),
    ("a rank outside its communicator", [LINE.replace(b'"rank":2', b'"rank":8')]),
    ("an id that is no hash", [LINE.replace(b'"0x7f8c496ae9f661"', b'"comm-a"')]),
    ("a boolean for a number", [LINE.replace(b'"pid":77', b'"pid":true')]),
    ("one communicator, two sizes", [LINE, LINE.replace(b'"n_ranks":8', b'"n_ranks":16')]),
    # as many records as lines, but not one on each: the JSON path reads neither of the first
    # two lines
    ("a record on two lines, two on one", [
        LINE.split(b'"coll_perf":')[0] + b'"coll_perf":',
        b"{" + LINE.split(b'"coll_perf":{')[1] + LINE, LINE]),
    ("a null dump_stats", [LINE, LINE[:-1] + b',"dump_stats":null}']),
])
def test_blocks_that_are_not_plain_are_refused_and_read_by_the_slower_paths(why, lines):
    block = _block(lines)
    assert decode_block(block, 1, "f") is None, why
    _same(parse_block(block, 1, "f"), parse_lines(lines, 1, "f"))


def test_versions_and_nan_are_noted_with_file_and_line_on_the_typed_path(caplog):
    unknown = LINE.replace(b'"v4.0"', b'"v9.1"')
    block = _block([LINE, LINE, unknown, P2P])
    assert decode_block(block, 1, "x.log") is not None
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        b = parse_block(block, 20, "x.log", problems)
    assert len(b) == 4
    assert "x.log:22: inspector_output_format_version 'v9.1'" in caplog.text
    assert 'x.log:23: a bandwidth written as the string "nan"' in caplog.text
    assert problems.counts["nan"] == 2 and problems.counts["unknown_version"] == 1


# a verbose point-to-point line: "nan" bandwidths, two kernel channels
P2P_VERBOSE = P2P[:-2] + (b',"event_trace_sn":{"p2p_start_sn":1,"p2p_stop_sn":2},'
                          b'"event_trace_ts":{"p2p_start_ts":1748030377748100,'
                          b'"p2p_stop_ts":1748030377748190,"kernel_events":['
                          b'{"channel_id":0,"kernel_start_ts":1748030377748120,'
                          b'"kernel_stop_ts":1748030377748180,"kernel_record_ts":1},'
                          b'{"channel_id":1,"kernel_start_ts":1748030377748110,'
                          b'"kernel_stop_ts":1748030377748185,"kernel_record_ts":2}]}}}')


@pytest.mark.parametrize("block_bytes", [64, 1500, 1 << 20])
def test_a_file_read_through_its_kept_buffer_gives_the_json_paths_rows(tmp_path, caplog,
                                                                      block_bytes):
    # 64 bytes: every line is longer than the buffer, which grows; 1,500: blocks of a line or
    # two; 1 MiB: one block
    padded = LINE.replace(b'"0x7f8c496ae9f661"', b'"007f8c496ae9f661"')   # RAS's spelling
    unknown = LINE.replace(b'"v4.0"', b'"v9.1"')
    lines = [_compact("inspector_readme_coll_perf_verbose.json"), P2P_VERBOSE, LINE, padded,
             unknown] * 3 + [LINE]
    path = tmp_path / "node1-pid77.log"
    path.write_bytes(b"\n".join(lines) + b"\n" + LINE[:150])        # died mid-line
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        got = NcclOps.concat(list(read_inspector_file(path, problems=problems,
                                                      block_bytes=block_bytes)), str(path))
    reference = Problems()
    want = parse_lines(lines, 1, str(path), reference)
    _same(got, want)
    assert len(got) == 16                                       # nothing else lost
    assert got.kstop_us.tolist()[1] == 1748030377748185         # the later channel's stop
    # both spellings of the hash are one communicator
    assert got.comms[int(got.comm[2])] == got.comms[int(got.comm[3])] == CommKey(
        0x7F8C496AE9F661, 2, 8, 1, "DP Group 0")
    assert problems.counts["nan"] == reference.counts["nan"] == 6
    assert problems.counts["unknown_version"] == 1 and problems.counts["truncated_line"] == 1
    assert f"{path}:5: inspector_output_format_version 'v9.1'" in caplog.text
    assert f"{path}:2: a bandwidth written as the string" in caplog.text
    assert f"{path}:17: the last line has no newline" in caplog.text


def test_every_recorded_gpu_file_is_read_by_the_typed_path_as_the_json_path_reads_it():
    # what real NCCL jobs wrote (H200: collectives; H100: point-to-point calls too)
    files = sorted((Path(__file__).parent / "fixtures").rglob("*.log.gz"))
    assert len(files) >= 12
    for f in files:
        data = gzip.decompress(f.read_bytes())
        assert decode_block(data, 1, str(f)) is not None, f      # no block refused
        got = NcclOps.concat(list(read_inspector_file(f)), str(f))
        _same(got, parse_lines(data.split(b"\n")[:-1], 1, str(f)))
        assert len(got) == data.count(b"\n")
