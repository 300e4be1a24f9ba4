"""``c4 analyze --flight-recorder``: the real gloo fixture and dumps constructed to torch's
format (no NCCL here)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

from typer.testing import CliRunner

from c4.cli import build_app
from tests.diagnosis.flight_recorder.torch_format import world, write

FIXTURE = Path(__file__).parent / "fixtures" / "gloo_hang_4ranks"


def test_json_and_table_output() -> None:
    app = build_app()
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(FIXTURE / "pickle"),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.stdout)["reports"]
    assert report["kind"] == "noncomm_hang" and report["suspects"][0]["rank"] == 3
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(FIXTURE / "json")])
    assert res.exit_code == 0, res.output
    assert "noncomm_hang" in res.stdout


def test_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(build_app(), ["analyze", "--flight-recorder", str(tmp_path)])
    assert res.exit_code == 2 and "no Flight Recorder dumps" in res.output


def _nccl_pipeline_hang(path: Path) -> Path:
    """Constructed to torch's format (no NCCL here): all_reduces and a 4-stage pipeline; then
    rank 1 stops (it never posts its receive) and ranks 0 and 2 wait on it."""
    recs = world(4)
    for _ in range(2):
        for rec in recs:
            rec.collective("0")
        for rec in recs:
            if rec.rank:
                rec.recv("0", rec.rank - 1)
            if rec.rank < 3:
                rec.send("0", rec.rank + 1)
    recs[0].send("0", 1, state="started")
    recs[2].recv("0", 1, state="started")
    return write(recs, path)


def _check_spec_section_3(doc: dict) -> None:
    """The reports document of shared specs section 3, for suspects without a topology."""
    assert set(doc) == {"reports"}
    for r in doc["reports"]:
        assert r["kind"] in ("noncomm_hang", "comm_hang", "noncomm_slow", "comm_slow", "error")
        assert r["suspects"], r
        for s in r["suspects"]:
            assert s["type"] == "rank" and s["id"] == str(s["rank"]) and isinstance(s["rank"], int)
            assert 0 <= s["score"] <= 1
        scores = [s["score"] for s in r["suspects"]]
        assert scores == sorted(scores, reverse=True)  # most likely first
        assert isinstance(r["first_seen_ns"], int) and r["first_seen_ns"] > 0
        assert isinstance(r["summary"], str) and r["summary"] and "\n" not in r["summary"]
        assert isinstance(r.get("pg", ""), str) and isinstance(r.get("seq", 0), int)
        assert isinstance(r["evidence"], dict)


def test_nccl_dumps_through_the_cli_follow_the_report_format(tmp_path: Path) -> None:
    """NCCL dumps constructed to torch's format (no NCCL here), through ``c4 analyze``."""
    _nccl_pipeline_hang(tmp_path)
    res = CliRunner().invoke(build_app(), ["analyze", "--flight-recorder", str(tmp_path),
                                           "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    _check_spec_section_3(doc)
    (hang,) = doc["reports"]
    assert [s["rank"] for s in hang["suspects"]][:1] == [1], hang["summary"]
    assert hang["kind"] == "noncomm_hang" and hang["suspects"][0]["score"] > 0.8


def test_prefix_chooses_a_set_and_damaged_dumps_fail_cleanly(tmp_path: Path) -> None:
    """NCCL dumps constructed to torch's format (no NCCL here) next to the real gloo fixture."""
    _nccl_pipeline_hang(tmp_path)
    for f in (FIXTURE / "pickle").iterdir():
        shutil.copy(f, tmp_path / f.name.replace("nccl_trace_rank_", "gloo_"))
    app = build_app()
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(tmp_path)])
    assert res.exit_code == 2 and "--prefix" in res.output
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(tmp_path), "--prefix",
                                   "gloo_", "--format", "json"])
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.stdout)["reports"]
    assert report["suspects"][0]["rank"] == 3  # the real gloo fixture's culprit
    res = CliRunner().invoke(app, ["analyze", str(FIXTURE / "json" / "fr_trace_0.json"),
                                   "--prefix", "x"])
    assert res.exit_code == 2 and "--prefix" in res.output
    d = pickle.loads((tmp_path / "nccl_trace_rank_1").read_bytes())
    d["entries"][2]["state"] = None
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(d))
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(tmp_path), "--prefix",
                                   "nccl_trace_rank_"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "nccl_trace_rank_1 (field 'state'): bad value" in res.output
