"""A report's onset is when its evidence begins, not when the detectors became sure: a GPU
10% slower from iteration 5 on was reported "since" iteration 12 when the trace was read in
blocks (its communicator's ring of samples had turned over between two judgements, the
slowdown's start with it). Offline and in stream mode, the onset is within an iteration of
the fault's."""

from __future__ import annotations

import pytest

from bench.accuracy.analyze import analyze_stream
from diagnosis.sim.config import FaultSpec, SimConfig
from tests.support.engine_builders import simulate_and_diagnose

ONSET = 5


def _config() -> SimConfig:
    # 16 layers: many calls per iteration, so a ring of 64 samples spans a few iterations
    return SimConfig(gpus=64, iterations=24, layers=16,
                     faults=(FaultSpec.parse(f"slow_gpu:auto@{ONSET},slow=1.1"),))


def _iteration(starts: list[int], t_ns: int) -> int:
    return sum(1 for s in starts if s <= t_ns) - 1


def test_offline_onset_is_where_the_slowdown_began(tmp_path):
    reports, truth, _ = simulate_and_diagnose(tmp_path, _config(), workers=1)
    [fault] = truth["faults"]
    [r] = [r for r in reports if r.kind == "noncomm_slow"]
    assert r.suspects[0].rank == fault["ranks"][0]
    assert _iteration(truth["iteration_start_ns"], r.first_seen_ns) == ONSET
    assert r.first_seen_ns >= fault["onset_ns"]


@pytest.mark.slow
def test_stream_onset_is_where_the_slowdown_began():
    out, truth = analyze_stream(_config())
    [fault] = truth["faults"]
    [r] = [r for r in out if r["kind"] == "noncomm_slow"]
    assert _iteration(truth["iteration_start_ns"], r["first_seen_ns"]) == ONSET
    assert r["first_seen_ns"] >= fault["onset_ns"]
