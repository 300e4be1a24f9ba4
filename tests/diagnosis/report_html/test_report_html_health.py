"""The HTML report of a trace with health records prints each fault's causes."""

from __future__ import annotations

from pathlib import Path

from diagnosis.report_html import from_trace
from diagnosis.report_html.page import render
from diagnosis.sim.config import FaultSpec, SimConfig
from diagnosis.sim.health import add_health
from diagnosis.sim.run import simulate


def test_causes_in_the_page(tmp_path: Path) -> None:
    cfg = SimConfig(gpus=64, iterations=24, seed=0,
                    faults=(FaultSpec("slow_gpu", "auto", 10, slow=1.5),))
    res = simulate(cfg, tmp_path)
    [planted] = add_health(tmp_path, cause="thermal", seed=0)
    data = from_trace(res.trace, topology=res.topology)
    slow = [f for f in data.faults if f.kind == "noncomm_slow"]
    assert slow and slow[0].causes[0]["target"] == planted.target
    page = render(data)
    assert "<b>cause</b> " + planted.target in page and "HW thermal slowdown" in page
