"""Times taken on different hosts disagree by up to the clocks' skew (the format promises under
1 ms; the simulator offsets each host's clock by up to 200 us). A receiver whose clock runs
ahead seems to enter a call after the transfer began; taking that as a late peer made a short
transfer look 7% fast one time and 7% slow the next. With dual-port NICs many cables carry a
single connection, so that noise alone was filed as a slow cable in a healthy job."""

from __future__ import annotations

from c4.topology import Topology
from diagnosis.engine import Engine
from diagnosis.sim.config import SimConfig
from diagnosis.sim.run import simulate
from diagnosis.trace.feed import feed_trace


def test_healthy_dual_port_job_has_no_slow_cable(tmp_path):
    cfg = SimConfig(gpus=512, iterations=30, microbatches=2, job="bench512", seed=3902146272,
                    fabric="dual_port")
    res = simulate(cfg, tmp_path)
    reports, _ = feed_trace(Engine(Topology.load(res.topology)), res.trace)
    assert reports == []
