"""Inspector JSON lines: every recorded sample to exactly what it says, the scanner equal to
the JSON path, and bad input warned about with its file and line while the rest is read."""

from __future__ import annotations

import gzip
import logging
import math

import numpy as np
import orjson

from diagnosis.nccl.inspector import (
    find_inspector_files,
    parse_block,
    parse_lines,
    read_inspector_file,
)
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import CommKey
from tests.diagnosis.nccl.support import fixture


def _records(path, problems=None):
    return [r for b in read_inspector_file(path, problems=problems) for r in b.records()]


def test_readme_output_example():
    (r,) = _records(fixture("inspector_readme_coll_perf.json"))
    assert r.comm == CommKey(0x7F8C496AE9F661, 2, 8, 1, None)
    assert (r.hostname, r.pid, r.dump_us) == ("example-hostname", 1639453, 1748030377748202)
    assert (r.op, r.sn, r.peer) == ("all_reduce", 1407, -1)
    assert (r.msg_bytes, r.exec_us) == (17179869184, 61974)
    assert r.busbw_gbs == 485.119099
    # no verbose times: the end is the dump time, the arrival the end less the kernel time
    assert (r.start_us, r.kernel_start_us, r.kernel_stop_us) == (None, None, None)


def test_readme_verbose_example_gives_the_calls_times():
    path = fixture("inspector_readme_coll_perf_verbose.json")
    (r,) = _records(path)
    assert r.comm == CommKey(0xE62DEDAA97644A, 4, 8, 1, None)
    assert (r.op, r.sn, r.msg_bytes, r.exec_us) == ("reduce_scatter", 1231, 2147483648, 41057)
    assert (r.start_us, r.kernel_start_us, r.kernel_stop_us) == (
        1752867229235059, 1752867229235181, 1752867229275811)
    (b,) = list(read_inspector_file(path))
    assert b.end_us.tolist() == [1752867229275811]
    assert b.enter_us.tolist() == [1752867229275811 - 41057]


def test_exporter_readme_example():
    (r,) = _records(fixture("inspector_exporter_readme_coll_perf.json"))
    assert r.comm == CommKey(0x9E7A479F95A66C, 31, 32, 4, None)
    assert (r.hostname, r.pid) == ("example-hostname", 468528)
    assert (r.op, r.sn, r.msg_bytes, r.exec_us) == ("reduce_scatter", 129, 65536, 110)
    assert r.busbw_gbs == 18.469236


def _compact(name):
    return orjson.dumps(orjson.loads(fixture(name).read_bytes()))


LINE = (b'{"header":{"id":"0x7f8c496ae9f661","comm_name":"DP Group 0","rank":2,"n_ranks":8,'
        b'"nnodes":1},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"",'
        b'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1748030377748202,'
        b'"hostname":"node1","pid":77},"coll_perf":{"coll":"AllReduce","coll_sn":1407,'
        b'"coll_msg_size_bytes":17179869184,"coll_exec_time_us":61974,'
        b'"coll_timing_source":"kernel_gpu","coll_algobw_gbs":277.210914,'
        b'"coll_busbw_gbs":485.119099}}')
P2P = (b'{"header":{"id":"0x7f8c496ae9f661","comm_name":"DP Group 0","rank":2,"n_ranks":8,'
       b'"nnodes":1},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"",'
       b'"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1748030377748300,'
       b'"hostname":"node1","pid":77},"p2p_perf":{"p2p":"Send","p2p_sn":3,"p2p_peer":5,'
       b'"p2p_msg_size_bytes":1048576,"p2p_exec_time_us":0,"p2p_timing_source":"kernel_gpu",'
       b'"p2p_algobw_gbs":"nan","p2p_busbw_gbs":"nan"}}')


def _same(a, b):
    for c in ("sn", "peer", "msg_bytes", "exec_us", "dump_us", "start_us", "kstart_us",
              "kstop_us", "line"):
        assert getattr(a, c).tolist() == getattr(b, c).tolist(), c
    assert [a.procs[i] for i in a.proc] == [b.procs[i] for i in b.proc]
    assert [a.comms[i] for i in a.comm] == [b.comms[i] for i in b.comm]
    assert [a.ops[i] for i in a.op] == [b.ops[i] for i in b.op]


def test_the_scanner_reads_compact_lines_as_the_json_path_does():
    lines = [_compact("inspector_readme_coll_perf.json"),
             _compact("inspector_readme_coll_perf_verbose.json"),
             _compact("inspector_exporter_readme_coll_perf.json"), LINE]
    fast = parse_block(b"\n".join(lines) + b"\n", 1, "f")
    _same(fast, parse_lines(lines, 1, "f"))
    assert len(fast) == 4
    assert fast.comms[int(fast.comm[3])] == CommKey(0x7F8C496AE9F661, 2, 8, 1, "DP Group 0")


def test_p2p_lines_and_nan_strings(caplog):
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        b = parse_block(LINE + b"\n" + P2P + b"\n", 10, "dump.log", problems)
    (coll, send) = b.records()
    assert (send.op, send.sn, send.peer, send.msg_bytes) == ("send", 3, 5, 1048576)
    assert send.exec_us == 0 and math.isnan(send.busbw_gbs)      # "nan" strings
    assert coll.sn == 1407
    assert problems.counts["nan"] >= 1
    assert "dump.log:11" in caplog.text                            # file and line


def test_nan_is_warned_once_per_read_and_counted_in_every_file(caplog):
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        for name in ("a.log", "b.log"):
            parse_block(P2P + b"\n" + LINE + b"\n" + P2P + b"\n", 1, name, problems)
    assert problems.counts["nan"] == 8                       # two fields on each of 4 lines
    assert caplog.text.count('"nan"') == 1 and "a.log:1:" in caplog.text


def test_bad_lines_are_skipped_with_file_and_line_and_the_rest_read(caplog):
    truncated = LINE[:120]
    unknown = LINE.replace(b'"v4.0"', b'"v9.1"').replace(b'"coll_sn":1407', b'"coll_sn":1408')
    v3 = LINE.replace(b'"v4.0"', b'"v3.0"').replace(b'"coll_sn":1407', b'"coll_sn":1409')
    block = b"\n".join([LINE, truncated, b"", unknown, v3]) + b"\n"
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        b = parse_block(block, 1, "x.log", problems)
    assert b.sn.tolist() == [1407, 1408, 1409]                     # nothing else lost
    assert b.line.tolist() == [1, 4, 5]
    assert problems.counts["bad_line"] == 1 and problems.counts["unknown_version"] == 1
    assert "x.log:2: not a JSON object" in caplog.text
    assert "x.log:4: inspector_output_format_version 'v9.1'" in caplog.text


def test_unmerged_v43_lines_inherit_header_and_drop_counts_are_kept():
    marker = (b'{"header":{"id":"0x1","rank":0,"n_ranks":2,"nnodes":1},"metadata":'
              b'{"inspector_output_format_version":"v4.3","dump_timestamp_us":5,'
              b'"hostname":"h","pid":9},"dump_stats":{"coll_records":2,'
              b'"coll_dropped_since_last_dump":7,"p2p_dropped_since_last_dump":1}}')
    bare = (b'{"coll_perf":{"coll":"AllGather","coll_sn":%d,"coll_msg_size_bytes":4096,'
            b'"coll_exec_time_us":3,"coll_algo":"RING","coll_busbw_gbs":1.5}}')
    proxy = b'{"proxy_trace":{"channel":0}}'
    block = b"\n".join([marker, bare % 0, proxy, bare % 1]) + b"\n"
    b = parse_block(block, 1, "v43.log")
    assert b.sn.tolist() == [0, 1] and b.dropped == 8
    assert b.comms[0] == CommKey(1, 0, 2, 1, None) and b.procs == [("h", 9)]


def test_lines_the_scanner_refuses_go_to_the_json_path():
    escaped = LINE.replace(b'"DP Group 0"', b'"DP \\"G\\" 0"')
    long_host = LINE.replace(b'"node1"', b'"' + b"n" * 90 + b'"')
    spaced = orjson.dumps(orjson.loads(LINE), option=orjson.OPT_INDENT_2).replace(b"\n", b" ")
    lines = [escaped, long_host, spaced]
    fast = parse_block(b"\n".join(lines) + b"\n", 1, "f")
    _same(fast, parse_lines(lines, 1, "f"))
    assert fast.comms[int(fast.comm[0])].name == 'DP "G" 0'


def test_gzip_jsonl_and_a_truncated_last_line(tmp_path, caplog):
    d = tmp_path / "dumps"
    (d / "sub").mkdir(parents=True)
    with gzip.open(d / "sub" / "h-pid1.jsonl.gz", "wb") as fh:
        fh.write(LINE + b"\n")
    (d / "h-pid2.log").write_bytes(LINE + b"\n" + LINE[:50])     # died mid-line
    (d / "notes.txt").write_text("x")
    files = find_inspector_files(d)
    assert [f.name for f in files] == ["h-pid2.log", "h-pid1.jsonl.gz"]
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        got = [len(b) for f in files for b in read_inspector_file(f, problems=problems)]
    assert got == [1, 1]
    assert problems.counts["truncated_line"] == 1
    assert "h-pid2.log:2: the last line has no newline" in caplog.text


def test_scanner_throughput_shape_many_lines():
    # many processes' lines in one block: one row each, tables interned
    lines = [LINE.replace(b'"pid":77', b'"pid":%d' % (i % 7)).replace(
        b'"coll_sn":1407', b'"coll_sn":%d' % i) for i in range(1000)]
    b = parse_block(b"\n".join(lines) + b"\n", 1, "f")
    assert len(b) == 1000 and len(b.procs) == 7 and len(b.comms) == 1
    assert np.array_equal(b.sn, np.arange(1000))


def test_a_gzip_file_cut_short_is_read_up_to_the_cut(tmp_path, caplog):
    lines = [LINE.replace(b'"coll_sn":1407', b'"coll_sn":%d' % i) for i in range(3000)]
    data = gzip.compress(b"\n".join(lines) + b"\n")
    path = tmp_path / "h-pid1.log.gz"
    path.write_bytes(data[:len(data) // 2])
    problems = Problems()
    with caplog.at_level(logging.WARNING):
        got = [b for b in read_inspector_file(path, problems=problems, block_bytes=4096)]
    sn = np.concatenate([b.sn for b in got])
    # every whole line before the cut, in order; the cut one warned about with its line
    assert len(sn) > 0 and sn.tolist() == list(range(len(sn)))
    assert problems.counts["truncated_file"] == 1
    assert f"{path}:{len(sn) + 1}: the file ends early" in caplog.text
