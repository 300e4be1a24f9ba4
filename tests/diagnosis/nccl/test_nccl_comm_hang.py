"""A communicator hung as a whole, seen through NCCL's own telemetry: the Inspector writes no
call that never completes, and RAS says only that every member launched it. Nothing places the
stuck transfer, so the hang is reported naming no component (not the first of a tie of every
member's NIC and cable, which singled one out at random)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.accuracy.nccl import analyze_nccl_run
from bench.accuracy.score import score_scenario
from tests.diagnosis.nccl.support import simulated


def test_a_whole_communicator_hang_through_ras_is_filed_unplaced(tmp_path):
    out = Path(simulated(str(tmp_path), "comm_hang:auto@6", gpus=64))
    reports = analyze_nccl_run(out, out / "topology.json", with_ras=True)
    hangs = [r for r in reports if r["kind"] == "comm_hang"]
    assert len(hangs) == 1 and len(reports) == 1
    assert hangs[0]["suspects"] == []
    assert "cannot be placed" in hangs[0]["summary"]
    sc = score_scenario(json.loads((out / "truth.json").read_text()), reports)
    assert sc.faults[0].detected and not sc.faults[0].top3 and sc.false_reports == 0


def _two_hosts_per_leaf(tmp_path: Path, fault: str) -> Path:
    """64 GPUs, two hosts per leaf: data-parallel rings cross leaves over two spines (ECMP)."""
    from diagnosis.sim.config import FaultSpec, SimConfig
    from diagnosis.sim.formats import sinks_for
    from diagnosis.sim.run import simulate

    cfg = SimConfig(gpus=64, pp=2, iterations=14, microbatches=2, job="t", hosts_per_leaf=2,
                    faults=(FaultSpec.parse(fault),), seed=3, checkpoint_every=0)
    out = tmp_path / fault.replace(":", "-")
    simulate(cfg, out, sinks=sinks_for(["nccl-inspector", "ncclras"]), trace=False)
    return out


def test_a_hang_tied_across_ecmp_routes_is_unplaced_not_pinned_on_a_leaf(tmp_path):
    # A dead uplink stops one data-parallel ring. Without connection records every leaf,
    # uplink and spine of its members' routes explains the hang equally; the old report named
    # the first of that tie (a healthy leaf), a false report.
    out = _two_hosts_per_leaf(tmp_path, "dead_link:uplink@6")
    reports = analyze_nccl_run(out, out / "topology.json", with_ras=True)
    assert [r["kind"] for r in reports] == ["comm_hang"]
    assert reports[0]["suspects"] == []
    assert "lie on different paths" in reports[0]["summary"]
    sc = score_scenario(json.loads((out / "truth.json").read_text()), reports)
    assert sc.faults[0].detected and sc.false_reports == 0


def test_a_hang_tied_along_one_path_still_names_that_path(tmp_path):
    # a dead NIC stops one pipeline send: both ends' NICs and cables and their leaf lie on its
    # one path, which is named
    out = _two_hosts_per_leaf(tmp_path, "dead_nic@6")
    reports = analyze_nccl_run(out, out / "topology.json", with_ras=True)
    truth = json.loads((out / "truth.json").read_text())
    assert [r["kind"] for r in reports] == ["comm_hang"]
    named = {(s["type"], s["id"]) for s in reports[0]["suspects"]}
    assert (truth["faults"][0]["component"]["type"],
            truth["faults"][0]["component"]["id"]) in named
    assert score_scenario(truth, reports).false_reports == 0
