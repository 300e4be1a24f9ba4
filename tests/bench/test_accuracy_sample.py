"""The accuracy bench at several sampling factors: the same scenarios and seeds per factor,
reduced traces (format version 2) analysed as written."""

from __future__ import annotations

import io
import json

import numpy as np

from bench.accuracy.analyze import analyze_file
from bench.accuracy.run import main, with_samples
from bench.accuracy.scenarios import scenarios
from bench.accuracy.score import FaultScore, ScenarioScore, latency_deltas
from bench.accuracy.table import print_comparison
from diagnosis.engine import Engine
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


def test_a_reduced_trace_is_analysed_as_written(tmp_path, monkeypatch):
    """The engine gets the sampling factor from the trace's own meta record (nobody else tells
    it), and the trace's progress, linkstat and port records with its sampled op rows."""
    told: list[int] = []
    fed = dict.fromkeys(("add_ops", "add_progress", "add_linkstats", "add_ports"), 0)
    set_sample = Engine.set_sample
    monkeypatch.setattr(Engine, "set_sample",
                        lambda self, k, *a, **kw: (told.append(k), set_sample(self, k, *a, **kw)))
    def counted(name: str):
        orig = getattr(Engine, name)

        def feed(self, recs):
            fed[name] += len(recs)
            return orig(self, recs)
        return feed
    for name in fed:
        monkeypatch.setattr(Engine, name, counted(name))

    res = simulate(SimConfig(gpus=64, iterations=4, microbatches=1, sample=4), tmp_path)
    reports = analyze_file(res.trace, res.topology)
    assert isinstance(reports, list)
    assert told == [4]
    lines = [json.loads(ln) for ln in res.trace.read_text().splitlines()]
    written = {t: sum(r["type"] == t for r in lines) for t in ("op", "progress", "linkstat",
                                                                "port")}
    assert all(written.values())
    assert fed == {"add_ops": written["op"], "add_progress": written["progress"],
                   "add_linkstats": written["linkstat"], "add_ports": written["port"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topology.json", "trace.jsonl",
                                                          "truth.json"]


def _score(*latencies: float | None) -> ScenarioScore:
    return ScenarioScore(tuple(FaultScore("slow_gpu", "gpu_slow", True, t is not None,
                                          t is not None, t is not None, latency_s=t)
                               for t in latencies), 1, 0, 10)


def test_latency_deltas_pair_the_same_fault_of_the_same_seed():
    runs = [(1, 64, "slow_gpu", 7, _score(2.0, 3.0)), (8, 64, "slow_gpu", 7, _score(3.5, None)),
            (1, 64, "slow_gpu", 9, _score(None)), (8, 64, "slow_gpu", 9, _score(4.0)),
            (1, 64, "dead_nic", 7, _score(1.0)), (8, 64, "dead_nic", 7, _score(1.5))]
    assert latency_deltas(runs) == {8: {(64, "slow_gpu"): [1.5], (64, "dead_nic"): [0.5]}}


def test_comparison_shows_latency_and_its_difference_per_factor():
    from bench.accuracy.score import summarize

    runs = [(1, 64, "slow_gpu", 7, _score(2.0)), (8, 64, "slow_gpu", 7, _score(3.5)),
            (16, 64, "slow_gpu", 7, _score(2.4)), (1, 64, "dead_nic", 7, _score(0.3)),
            (8, 64, "dead_nic", 7, _score(1.3 + 1e-9)), (16, 64, "dead_nic", 7, _score(1.3))]
    rows = {k: summarize((lab, g, sc, f"s{k}") for kk, g, lab, _, sc in runs if kk == k)
            for k in (1, 8, 16)}
    out = io.StringIO()
    print_comparison(rows, out, deltas=latency_deltas(runs), window_s=1.0)
    head, sub, _, nic, row = out.getvalue().splitlines()
    assert head.split() == ["gpus", "fault", "K=1", "K=8", "K=16"]
    assert sub.split().count("lat") == 3 and sub.count("Δlat s") == 2
    cells = row.split()
    assert cells[:2] == ["64", "slow_gpu"] and cells[5] == "2.0"
    assert cells[9:11] == ["3.5", "+1.5/+1.5*"]          # more than a window later: starred
    assert cells[14:16] == ["2.4", "+0.4/+0.4"]
    assert nic.split()[9:11] == ["1.3", "+1.0/+1.0"]     # one window, give or take a float


def test_bench_prints_a_row_group_per_factor_and_the_call_rate(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--gpus", "64", "--seeds", "1", "--kinds", "slow_gpu", "--sample", "1,8",
                 "--window-ms", "500", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "K=1: full trace" in text and "K=8: reduced trace" in text
    assert "calls/s per rank" in text and "the same scenarios and seeds" in text
    assert "1 layer per stage, 40 iterations," in text
    assert "Δlat s: latency at K minus latency at K=1" in text
    res = json.loads(out.read_text())
    assert res["samples"] == [1, 8] and set(res["rows_by_sample"]) == {"1", "8"}
    by_k = {k: [d for d in res["scenarios"] if d["sample"] == k] for k in (1, 8)}
    assert [d["seed"] for d in by_k[1]] == [d["seed"] for d in by_k[8]]
    assert all(d["records"].get("progress") for d in by_k[8])
    assert not any(d["records"].get("progress") for d in by_k[1])
    assert all("analyzed" not in d for d in res["scenarios"])
    assert 5 < res["calls_per_s_per_rank"] < 30
    deltas = res["latency_delta_s_by_sample"]["8"]
    assert all(np.isfinite(x) for cell in deltas for x in cell["deltas"])


def test_an_unknown_kind_is_refused_with_the_kinds_there_are(capsys):
    """``healthy`` is no fault kind: the runs without a fault are always made."""
    import pytest
    with pytest.raises(SystemExit) as e:
        main(["--kinds", "slow_gpu,healthy", "--gpus", "64"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--kinds healthy: choose from slow_gpu" in err and "always included" in err


def test_runs_too_short_for_a_fault_are_refused(capsys):
    import pytest
    with pytest.raises(SystemExit) as e:
        main(["--iterations", "6", "--gpus", "64"])
    assert e.value.code == 2
    assert "--iterations must be at least 10" in capsys.readouterr().err
