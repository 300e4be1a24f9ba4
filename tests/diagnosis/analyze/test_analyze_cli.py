"""``c4 analyze`` end to end: a real subprocess on a trace file, JSON parsed and checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from diagnosis.trace.synth import SynthJob

REPO = Path(__file__).resolve().parents[3]


def c4(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "c4", "analyze", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)


def test_analyze_json_names_the_hung_rank(tmp_path):
    job = SynthJob(hang_rank=9)
    topo = job.topology()
    topo.save(tmp_path / "topo.json")
    job.write(tmp_path / "trace.jsonl", topo)
    out = c4(str(tmp_path / "trace.jsonl"), "--topology", str(tmp_path / "topo.json"),
             "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["kind"] for r in doc["reports"]] == ["noncomm_hang"]
    rep = doc["reports"][0]
    assert rep["suspects"][0] == {"type": "gpu", "id": "node002/gpu1", "score": 0.95, "rank": 9}
    assert rep["pg"] == "tp.2" and isinstance(rep["seq"], int)
    assert rep["first_seen_ns"] >= job.t0_ns and rep["summary"]


def test_analyze_healthy_trace_without_topology_table_and_json(tmp_path):
    SynthJob(seed=5).write(tmp_path / "trace.jsonl")
    out = c4(str(tmp_path / "trace.jsonl"), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"reports": []}
    table = c4(str(tmp_path / "trace.jsonl"), "-o", str(tmp_path / "out.txt"))
    assert table.returncode == 0, table.stderr
    assert "no faults found" in (tmp_path / "out.txt").read_text()


def test_analyze_reports_malformed_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"rank","rank":0,"host":"h"}\n{"type":"group","pg":"g"}\n')
    out = c4(str(bad))
    assert out.returncode == 2
    assert "bad.jsonl:2" in out.stderr and "'ranks'" in out.stderr


def test_analyze_flight_recorder_directory_without_dumps(tmp_path):
    out = c4("--flight-recorder", str(tmp_path), "--format", "json")
    assert out.returncode == 2
    assert "c4 analyze:" in out.stderr


def _without_end(src: Path, dst: Path) -> None:
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(ln for ln in lines if json.loads(ln).get("type") != "end"))


def test_trace_without_end_record_says_how_to_judge_its_open_calls(tmp_path):
    """An exporter that writes no end record: as far as the trace tells, the job stopped at
    its last record and the open calls have waited for nothing. c4 says so, and judges them
    once told when recording stopped."""
    job = SynthJob(hang_rank=9)
    topo = job.topology()
    topo.save(tmp_path / "topo.json")
    job.write(tmp_path / "full.jsonl", topo)
    _without_end(tmp_path / "full.jsonl", tmp_path / "trace.jsonl")
    base = (str(tmp_path / "trace.jsonl"), "--topology", str(tmp_path / "topo.json"),
            "--format", "json")
    out = c4(*base)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reports"] == []
    assert "no end record" in out.stderr and "--stopped-after SECONDS" in out.stderr
    out = c4(*base, "--stopped-after", "120")
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)["reports"]
    assert [(r["kind"], r["suspects"][0].get("rank")) for r in reports] == [("noncomm_hang", 9)]
    assert "no end record" not in out.stderr


def test_stopped_after_is_ignored_with_an_end_record(tmp_path):
    job = SynthJob(hang_rank=9)
    job.write(tmp_path / "trace.jsonl")
    out = c4(str(tmp_path / "trace.jsonl"), "--format", "json", "--stopped-after", "0")
    assert out.returncode == 0, out.stderr
    assert [r["kind"] for r in json.loads(out.stdout)["reports"]] == ["noncomm_hang"]
    assert "has an end record" in out.stderr
    out = c4("--flight-recorder", str(tmp_path), "--stopped-after", "5")
    assert out.returncode == 2 and "--stopped-after is about a TRACE" in out.stderr


def _hang_v2(tmp_path: Path, **kwargs) -> tuple[str, ...]:
    """A job whose rank 9 hangs, as a version 2 trace; the c4 analyze arguments for it."""
    from tests.support.v2trace import to_v2

    job = SynthJob(hang_rank=9)
    topo = job.topology()
    topo.save(tmp_path / "topo.json")
    job.write(tmp_path / "v1.jsonl", topo)
    counts = to_v2(tmp_path / "v1.jsonl", tmp_path / "trace.jsonl", **kwargs)
    assert counts["progress"] and counts["linkstat"] and counts["port"]
    return str(tmp_path / "trace.jsonl"), "--topology", str(tmp_path / "topo.json"), "--format", \
        "json"


def test_analyze_reads_a_version_2_trace(tmp_path):
    out = c4(*_hang_v2(tmp_path))
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)["reports"]
    assert [(r["kind"], r["suspects"][0].get("rank")) for r in reports] == [("noncomm_hang", 9)]
    assert "WARNING" not in out.stderr


def test_analyze_reads_a_gzip_mix_of_version_1_and_2_records(tmp_path):
    import gzip

    # some connections keep their conn records (with retrans), the others send linkstats
    args = _hang_v2(tmp_path, keep_conn=lambda c: c["src"] % 2 == 0)
    text = (tmp_path / "trace.jsonl").read_text()
    assert '"type": "conn"' in text and '"type": "linkstat"' in text
    lines = text.splitlines(keepends=True)
    lines = [ln.replace('"t_start_ns"', '"retrans": 1, "t_start_ns"') if '"conn"' in ln else ln
             for ln in lines]
    gz = tmp_path / "trace.jsonl.gz"
    gz.write_bytes(gzip.compress("".join(lines).encode()))
    out = c4(str(gz), *args[1:])
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)["reports"]
    assert [(r["kind"], r["suspects"][0].get("rank")) for r in reports] == [("noncomm_hang", 9)]


def test_analyze_skips_unknown_record_types_with_one_warning_each(tmp_path):
    args = _hang_v2(tmp_path)
    path = tmp_path / "trace.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    extra = ['{"type": "gpu_temp", "rank": 0, "celsius": 70}\n',
             '{"type": "nvlink", "rank": 0}\n']
    path.write_text("".join(lines[:40] + extra * 3 + lines[40:] + extra))
    out = c4(*args)
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)["reports"]
    assert [(r["kind"], r["suspects"][0].get("rank")) for r in reports] == [("noncomm_hang", 9)]
    assert out.stderr.count("unknown type") == 2
    assert "trace.jsonl:41: skipping records of unknown type 'gpu_temp'" in out.stderr
    assert "trace.jsonl:42: skipping records of unknown type 'nvlink'" in out.stderr


def test_analyze_help_says_which_traces_it_reads():
    out = c4("--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.replace("\u2502", " ").split())     # without the box's sides
    assert "version 1 or 2" in text and ".gz" in text
    assert "default: CPUs - 1, at most 4" in text


def test_a_stall_that_cleared_mid_run_is_listed_with_onset_and_end(tmp_path):
    """Rank 1 stalls 20 s before call 50 (rank 0 waits in it), then the job goes on: the
    post-mortem lists the hang as cleared, from its onset to its end, instead of dropping it."""
    from diagnosis.trace import TraceWriter

    ms, t0, stall = 1_000_000, 1_700_000_000_000_000_000, 20_000_000_000
    with TraceWriter(tmp_path / "stall.jsonl") as w:
        w.meta("stall")
        w.rank(0, "h0")
        w.rank(1, "h1")
        w.group("0", [0, 1])
        t = t0
        for seq in range(120):
            late = stall if seq == 50 else 0
            for rank in (0, 1):
                enter = t + (late if rank == 1 else 0) + rank * 100_000
                w.op(rank, "0", seq, "all_reduce", 4096, enter, t + late + 2 * ms)
            t += late + 10 * ms
        w.end(t + 10 * ms)
    out = c4(str(tmp_path / "stall.jsonl"), "--format", "json", "--jobs", "0")
    assert out.returncode == 0, out.stderr
    hangs = [r for r in json.loads(out.stdout)["reports"] if r["kind"] == "noncomm_hang"]
    assert len(hangs) == 1, hangs
    (hang,) = hangs
    assert hang["state"] == "resolved" and hang["evidence"].get("cleared") is True
    onset = t0 + 50 * 10 * ms
    assert abs(hang["first_seen_ns"] - onset) < 100 * ms
    assert onset + 15_000 * ms < hang["last_seen_ns"] <= onset + stall + 1_000 * ms
    assert hang["suspects"][0].get("rank") == 1
    table = c4(str(tmp_path / "stall.jsonl"), "--jobs", "0")
    assert "cleared" in table.stdout and "noncomm_hang" in table.stdout
    # torch's group "0" in words, not "0 #50" (which reads as a count)
    assert "process group 0 call #50" in table.stdout, table.stdout


def test_analyze_jsonl_is_one_report_per_line(tmp_path):
    job = SynthJob(hang_rank=9)
    job.write(tmp_path / "trace.jsonl", job.topology())
    doc = c4(str(tmp_path / "trace.jsonl"), "--format", "json", "--jobs", "0")
    lines = c4(str(tmp_path / "trace.jsonl"), "--format", "jsonl", "--jobs", "0")
    assert lines.returncode == 0, lines.stderr
    assert [json.loads(x) for x in lines.stdout.splitlines()] == \
        json.loads(doc.stdout)["reports"]
