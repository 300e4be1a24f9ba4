"""The accuracy bench at several sampling factors: the same scenarios and seeds per factor,
reduced traces analysed (as version 1 projections while the reader takes only version 1)."""

from __future__ import annotations

import json

import pytest

from bench.accuracy.analyze import AS_WRITTEN, V1_PROJECTION, _refuses_v2, analyze_file
from bench.accuracy.rewrite import V2_TYPES, project_v1
from bench.accuracy.run import main, with_samples
from bench.accuracy.scenarios import scenarios
from diagnosis.errors import FormatError
from diagnosis.sim import SimConfig, simulate


def test_each_scenario_once_per_factor_on_the_same_seed():
    todo = scenarios([64], 1, False, kinds=["slow_gpu"])
    runs = with_samples(todo, (1, 16, 64), 250.0)
    assert len(runs) == 3 * len(todo)
    assert len({r.name for r in runs}) == len(runs)
    for base in todo:
        mine = [r for r in runs if r.name.startswith(base.name)]
        assert [r.cfg.sample for r in mine] == [None, 16, 64]
        assert {r.cfg.seed for r in mine} == {base.cfg.seed}
        assert {r.cfg.faults for r in mine} == {base.cfg.faults}
        assert {r.cfg.window_ms for r in mine[1:]} == {250.0}


def test_v1_projection_keeps_the_sampled_calls_only(tmp_path):
    res = simulate(SimConfig(gpus=64, iterations=3, microbatches=1, sample=8), tmp_path)
    dst = tmp_path / "v1.jsonl"
    assert project_v1(res.trace, dst) == 8
    before = res.trace.read_text().splitlines()
    after = dst.read_text().splitlines()
    assert json.loads(after[0]) == {"type": "meta", "version": 1, "job": "sim"}
    assert after[1:] == [ln for ln in before[1:]
                         if json.loads(ln)["type"] not in V2_TYPES]
    assert len(after) < len(before)


def test_analysing_a_reduced_trace_runs_whatever_the_reader_takes(tmp_path):
    res = simulate(SimConfig(gpus=64, iterations=4, microbatches=1, sample=4), tmp_path)
    reports, how = analyze_file(res.trace, res.topology)
    assert how in (AS_WRITTEN, V1_PROJECTION) and isinstance(reports, list)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topology.json", "trace.jsonl",
                                                          "truth.json"]


def test_only_a_refusal_of_version_2_falls_back():
    assert _refuses_v2(FormatError("format version 2 is not supported (only 1)",
                                   line=1, field="version"))
    assert _refuses_v2(RuntimeError("c4 analyze failed (2): unknown record type 'progress'; "
                                    "expected one of meta, rank"))
    assert not _refuses_v2(FormatError("op record needs an integer seq", line=9, field="seq"))
    assert not _refuses_v2(ValueError("format version 2 is not supported"))


def test_bench_prints_a_row_group_per_factor_and_the_call_rate(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--gpus", "64", "--seeds", "1", "--kinds", "slow_gpu", "--sample", "1,8",
                 "--window-ms", "500", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "K=1: full trace" in text and "K=8: reduced trace" in text
    assert "calls/s per rank" in text and "the same scenarios and seeds" in text
    res = json.loads(out.read_text())
    assert res["samples"] == [1, 8] and set(res["rows_by_sample"]) == {"1", "8"}
    by_k = {k: [d for d in res["scenarios"] if d["sample"] == k] for k in (1, 8)}
    assert [d["seed"] for d in by_k[1]] == [d["seed"] for d in by_k[8]]
    assert all(d["records"].get("progress") for d in by_k[8])
    assert not any(d["records"].get("progress") for d in by_k[1])
    assert 5 < res["calls_per_s_per_rank"] < 30


def test_stream_mode_takes_only_the_full_stream():
    with pytest.raises(SystemExit):
        main(["--quick", "--mode", "stream", "--sample", "1,16"])
