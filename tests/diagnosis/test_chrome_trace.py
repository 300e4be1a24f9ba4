"""``diagnosis.chrome_trace``: a job's calls and faults as Chrome trace events that follow the
format (checked by tests.support.trace_events), one process per host and one thread per rank,
bounded for large jobs; and ``c4 analyze --chrome-trace`` on a trace file."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto.codec import Columns
from c4.report import FaultReport, Suspect
from diagnosis.chrome_trace import ChromeTraceError, chrome_events, write_chrome_trace
from diagnosis.trace import TraceWriter
from tests.support.trace_events import check_trace_events

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
HOSTS = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}


def _ops(rows: list[tuple]) -> Columns:
    """rows: (rank, op, seq, enter_ms, end_ms or None, peer)."""
    strings = ["0", "float32", "all_reduce", "isend", "irecv"]
    n = len(rows)
    col = list(zip(*rows, strict=True))
    enter = T0 + (np.asarray(col[3], dtype=np.float64) * MS).astype(np.int64)
    end = np.array([-1 if e is None else T0 + int(e * MS) for e in col[4]], np.int64)
    return Columns({
        "rank": np.asarray(col[0], np.int32), "pg": np.zeros(n, np.uint32),
        "seq": np.asarray(col[2], np.int64),
        "op": np.asarray([strings.index(o) for o in col[1]], np.uint32),
        "nbytes": np.full(n, 4096, np.int64), "dtype": np.ones(n, np.uint32),
        "t_enter_ns": enter, "t_start_ns": np.full(n, -1, np.int64), "t_end_ns": end,
        "status": np.zeros(n, np.uint8), "peer": np.asarray(col[5], np.int32)}, strings)


def _hang(at_ms: float, rank: int = 3) -> FaultReport:
    return FaultReport("noncomm_hang", (Suspect("rank", str(rank), 0.9, rank=rank),),
                       T0 + int(at_ms * MS), f"rank {rank} stopped", pg="0", seq=2,
                       id="noncomm_hang:rank:3", last_seen_ns=T0 + int((at_ms + 50) * MS))


def _job() -> tuple[Columns, list[FaultReport]]:
    rows = []
    for seq in range(3):
        for r in range(4):
            if seq == 2 and r == 3:
                continue                   # rank 3 never came to call 2
            end = None if seq == 2 else seq * 10 + 5
            rows.append((r, "all_reduce", seq, seq * 10 + 0.1 * r, end, -1))
    # rank 0's isend overlaps its irecv without nesting in it: two lanes
    rows += [(0, "isend", 0, 6.0, 8.0, 1), (0, "irecv", 0, 7.0, 9.0, 1)]
    return _ops(rows), [_hang(21.0)]


def test_calls_and_faults_follow_the_format():
    ops, faults = _job()
    events = list(chrome_events(ops, faults, HOSTS, gpus={3: "node1/gpu1"},
                                end_ns=T0 + 80 * MS))
    check_trace_events({"traceEvents": events})
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {0: "c4 faults", 1: "node0", 2: "node1"}
    assert names[(2, 3)] == "rank 3 (node1/gpu1)" and names[(1, 0)] == "rank 0"
    calls = [e for e in events if e["ph"] == "X" and e["cat"] != "fault"]
    assert len(calls) == len(ops)
    # every rank's calls on its host's process and its own thread (or an overlap lane of it)
    assert all(e["pid"] == 1 + (HOSTS[e["tid"] % (1 << 20)] == "node1") for e in calls)
    lanes = {e["tid"] for e in calls if e["tid"] >= 1 << 20}
    assert len(lanes) == 1 and names[(1, lanes.pop())] == "rank 0, overlapping 1"
    # a call still open when recording stopped lasts until then
    still = [e for e in calls if e["args"].get("open")]
    assert len(still) == 3 and all(e["name"] == "all_reduce (open)" for e in still)
    assert all(abs(e["ts"] + e["dur"] - 80_000) < 1e-3 for e in still)
    sends = [e for e in calls if e["cat"] == "p2p"]
    assert {e["args"]["peer"] for e in sends} == {1} and len(sends) == 2
    marks = [e for e in events if e["ph"] == "i"]
    assert {e["s"] for e in marks} == {"g", "t"}
    on_rank = next(e for e in marks if e["s"] == "t")
    assert (on_rank["pid"], on_rank["tid"]) == (2, 3)
    assert on_rank["args"]["id"] == "noncomm_hang:rank:3"
    assert on_rank["args"]["suspects"][0]["rank"] == 3
    assert on_rank["ts"] == pytest.approx(21_000)
    span = next(e for e in events if e["ph"] == "X" and e["cat"] == "fault")
    assert span["pid"] == 0 and span["dur"] == pytest.approx(50_000)


def test_back_to_back_calls_share_their_rank_thread():
    """Calls that start as the previous ends, hours into a job at odd nanoseconds: one thread,
    in order, none crossing another by a rounding error."""
    rng = np.random.default_rng(7)
    ends = 2_771_887_329 * 1000 + np.cumsum(rng.integers(1, 9_000_000, 2_001))
    ops = _ops([(0, "all_reduce", i, 0.0, 1.0, -1) for i in range(2_000)])
    ops["t_enter_ns"][:] = T0 + ends[:-1]         # times to the nanosecond
    ops["t_end_ns"][:] = T0 + ends[1:]
    events = check_trace_events({"traceEvents": list(chrome_events(ops, [], {0: "h"}))})
    calls = [e for e in events if e["ph"] == "X"]
    assert len(calls) == 2_000 and {e["tid"] for e in calls} == {0}


def test_a_large_job_is_cut_around_the_first_fault(tmp_path):
    rows = [(r, "all_reduce", s, s * 1.0 + 0.01 * r, s * 1.0 + 0.5, -1)
            for s in range(2_500) for r in range(4)]
    ops = _ops(rows)
    out = tmp_path / "big.json"
    got = write_chrome_trace(out, "big", ops, [_hang(1_800.0)], HOSTS, max_calls=1_000)
    events = check_trace_events(json.loads(out.read_text()))
    calls = [e for e in events if e["ph"] == "X" and e["cat"] == "collective"]
    assert got.cut and got.calls == len(calls) == 1_000 and got.calls_total == 10_000
    first, last = min(e["ts"] for e in calls), max(e["ts"] for e in calls)
    assert first < 1_800_000 < last and last - first < 260_000
    assert "--max-calls 1,000" in got.notes[0] and "fault's onset" in got.notes[0]
    assert json.loads(out.read_text())["otherData"]["calls_total"] == 10_000


def test_a_window_bounds_the_calls_and_gzip_is_written(tmp_path):
    rows = [(r, "all_reduce", s, s * 10.0, s * 10.0 + 5, -1) for s in range(100)
            for r in range(4)]
    ops = _ops(rows)
    out = tmp_path / "w.json.gz"
    got = write_chrome_trace(out, "w", ops, [], HOSTS, since_s=0.2, until_s=0.3)
    with gzip.open(out, "rt") as fh:
        events = check_trace_events(json.load(fh))
    seqs = sorted({e["args"]["seq"] for e in events if e["ph"] == "X"})
    assert seqs == list(range(20, 31)) and got.window_s == (0.2, 0.3)
    with pytest.raises(ChromeTraceError, match="give --until later than --since"):
        write_chrome_trace(tmp_path / "x.json", "w", ops, [], HOSTS, since_s=3, until_s=1)
    assert not (tmp_path / "x.json").exists()


def _hung_trace(path) -> None:
    with TraceWriter(path) as w:
        w.meta("hungjob")
        for r in range(4):
            w.rank(r, HOSTS[r])
        w.group("0", list(range(4)))
        for seq in range(300):
            base = T0 + seq * 20 * MS
            for r in range(4):
                if seq == 299 and r == 3:
                    continue
                w.op(r, "0", seq, "all_reduce", 4096, base + r * 1000,
                     -1 if seq == 299 else base + 2 * MS)
        w.end(T0 + 300 * 20 * MS + 40_000 * MS)


def test_analyze_writes_the_trace_files_calls_and_the_faults_it_found(tmp_path):
    trace, out = tmp_path / "hung.jsonl", tmp_path / "hung.json"
    _hung_trace(trace)
    res = CliRunner().invoke(build_app(), ["analyze", str(trace), "--format", "json",
                                           "--jobs", "0", "--chrome-trace", str(out)])
    assert res.exit_code == 0, res.output
    reports = json.loads(res.stdout)["reports"]     # stdout stays the reports' JSON
    assert "Chrome trace" in res.stderr
    hang = next(r for r in reports if r["kind"] == "noncomm_hang")
    events = check_trace_events(json.loads(out.read_text()))
    assert sum(e["ph"] == "X" and e["cat"] == "collective" for e in events) == 4 * 300 - 1
    marks = [e for e in events if e["ph"] == "i" and e["args"]["kind"] == "noncomm_hang"]
    assert marks and marks[0]["args"]["suspects"][0]["rank"] == 3 == hang["suspects"][0]["rank"]
    assert json.loads(out.read_text())["otherData"]["job"] == "hungjob"


def test_analyze_says_what_the_window_options_need(tmp_path):
    trace = tmp_path / "t.jsonl"
    _hung_trace(trace)
    res = CliRunner().invoke(build_app(), ["analyze", str(trace), "--since", "3"])
    assert res.exit_code == 2 and "give it too" in res.stderr and not res.stdout
    res = CliRunner().invoke(build_app(), ["analyze", "--flight-recorder", str(tmp_path),
                                           "--chrome-trace", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "TRACE file" in res.stderr


@pytest.mark.parametrize("bad, why", [
    ([{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
      {"name": "b", "ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 10}], "crosses"),
    ([{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 1},
      {"name": "b", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1}], "out of time order"),
    ([{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0}], "event 0"),
    ([{"name": "a", "ph": "i", "pid": "1", "tid": 1, "ts": 0}], "event 0"),
    ([{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {}}], "event 0"),
])
def test_the_format_check_catches_what_viewers_get_wrong(bad, why):
    with pytest.raises(AssertionError, match=why):
        check_trace_events({"traceEvents": bad})
