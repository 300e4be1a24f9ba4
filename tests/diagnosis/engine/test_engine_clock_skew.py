"""Times taken on different hosts disagree by up to the clocks' skew (the format promises under
1 ms; the simulator offsets each host's clock by up to 200 us). A receiver whose clock runs
ahead seems to enter a call after the transfer began; taking that as a late peer made a short
transfer look 7% fast one time and 7% slow the next. With dual-port NICs many cables carry a
single connection, so that noise alone was filed as a slow cable in a healthy job."""

from __future__ import annotations

from diagnosis.sim.config import SimConfig
from tests.support.engine_builders import simulate_and_diagnose


def test_healthy_dual_port_job_has_no_slow_cable(tmp_path):
    cfg = SimConfig(gpus=512, iterations=30, microbatches=2, job="bench512", seed=3902146272,
                    fabric="dual_port")
    reports, _, _ = simulate_and_diagnose(tmp_path, cfg)
    assert reports == []
