"""c4 sim health series: healthy samples for every component, the planted cause on the
fault's component from its onset, decoys away from it; joined to the report end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.accuracy.health import run_one
from c4.proto.health import HealthRecord
from diagnosis.sim.config import FaultSpec, SimConfig, SimError
from diagnosis.sim.health import add_health
from diagnosis.sim.run import simulate
from diagnosis.trace.reader import read_trace


def test_series_planted_and_decoys(tmp_path: Path) -> None:
    cfg = SimConfig(gpus=32, iterations=6, seed=1,
                    faults=(FaultSpec("slow_gpu", "auto", 3, slow=1.5),))
    simulate(cfg, tmp_path)
    planted = add_health(tmp_path, cause="thermal", decoys=2, seed=1)
    truth = json.loads((tmp_path / "truth.json").read_text())
    fault_gpu = truth["faults"][0]["component"]["id"]
    assert (planted[0].cause, planted[0].target, planted[0].decoy) == ("thermal", fault_gpu, False)
    assert all(p.target.split("/")[0] != fault_gpu.split("/")[0] for p in planted[1:])
    assert truth["health"]["planted"][0]["finding"] == "thermal_slowdown"
    recs = [i for i in read_trace(tmp_path / "trace.jsonl") if isinstance(i, HealthRecord)]
    assert len(recs) == truth["health"]["records"]
    mine = [r for r in recs if r.component == fault_gpu]
    onset = planted[0].onset_ns
    assert all("hw_thermal_slowdown" in r.reasons for r in mine if r.t_ns >= onset)
    assert not any(r.reasons for r in mine if r.t_ns < onset)
    assert {r.target for r in recs} >= {"node000", "node000/gpu0", "node000/nic0"}


def test_cause_needs_its_fault(tmp_path: Path) -> None:
    simulate(SimConfig(gpus=32, iterations=4, seed=1), tmp_path)
    with pytest.raises(SimError, match="inject one"):
        add_health(tmp_path, cause="cpu_contention")


def test_thermal_cause_joined_to_the_slow_gpu_report(tmp_path: Path) -> None:
    row = run_one("thermal", 0, 64, 24, 3, tmp_path)
    assert row["found"] and row["attached"] and row["top"]
    assert row["decoy_named"] == 0


def test_healthy_run_files_no_health_report(tmp_path: Path) -> None:
    row = run_one(None, 1, 64, 16, 0, tmp_path)
    assert row["health_reports"] == 0 and row["decoy_named"] == 0
