"""A fault that slows (nearly) every connection, such as the one switch of a small fabric slowed
every other pair of iterations: the pooled rate of slow samples, which a connection is judged
against, rises with the fault itself; a connection's own quieter past tells its healthy rate."""

from __future__ import annotations

from diagnosis.sim.config import FaultSpec, SimConfig
from tests.support.engine_builders import simulate_and_diagnose


def analyze(tmp_path, faults, **reduced):
    cfg = SimConfig(gpus=128, iterations=40, microbatches=2, seed=11, fabric="single_switch",
                    faults=faults, **reduced)
    reports, _, _ = simulate_and_diagnose(tmp_path, cfg)
    return [(r.kind, r.suspects[0].id) for r in reports]


def test_intermittent_slow_single_switch_is_named(tmp_path):
    fault = FaultSpec("slow_switch", "switch0", onset=17, slow=2.5, every=4, on=2)
    assert analyze(tmp_path, (fault,)) == [("comm_slow", "switch0")]


def test_healthy_single_switch_job_has_no_report(tmp_path):
    assert analyze(tmp_path, ()) == []


def test_single_switch_slow_every_other_iteration_is_named_on_reduced_telemetry(tmp_path):
    """Windows of linkstat (K=16) straddle the slow iterations: more than half of every
    connection's samples are slow, which the pooled noise estimate took for noise (thresholds
    above the fault itself, nothing reported)."""
    fault = FaultSpec("slow_switch", "switch0", onset=8, slow=3.0, every=2, on=1)
    assert analyze(tmp_path, (fault,), sample=16, layers=4) == [("comm_slow", "switch0")]


def test_healthy_single_switch_job_has_no_report_on_reduced_telemetry(tmp_path):
    assert analyze(tmp_path, (), sample=16, layers=4) == []
