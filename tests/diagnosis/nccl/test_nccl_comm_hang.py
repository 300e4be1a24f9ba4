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
