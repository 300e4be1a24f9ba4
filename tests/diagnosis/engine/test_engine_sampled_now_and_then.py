"""Faults that come and go, with one call in 64 kept: a bucket of the groups' pace then spans
a few iterations, so a host slow one iteration in three is behind in some buckets only (its
episodes), and a GPU slow one iteration in two holds its group back in every bucket, while
inside the group's kept calls it is late only in its slow iterations."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.accuracy import hard
from diagnosis.sim.config import SimConfig
from tests.support.engine_builders import simulate_and_diagnose

K = 64


def _hard_case(name: str) -> SimConfig:
    """A hard case of ``bench.accuracy.hard`` (512 GPUs, 16 layers), its trace reduced to one
    call in ``K``."""
    family = {"int": "intermittent"}[name.split("-")[0]]
    [sc] = [s for s in hard.scenarios([512], 1, "rail", (family,), layers=16)
            if s.name == name]
    return replace(sc.cfg, sample=K, window_ms=1000.0)


@pytest.mark.slow
def test_a_host_slow_one_iteration_in_three_is_reported_again_and_again(tmp_path):
    """2.6x slower one iteration in three from the eighth: its group's buckets holding its slow
    iterations are far behind its replicas', the others level."""
    reports, truth, _ = simulate_and_diagnose(tmp_path, _hard_case("int-slow_host-512-0"))
    [fault] = truth["faults"]
    assert fault["intermittent"] == {"every": 3, "on": 1}
    [r] = reports
    assert r.kind == "noncomm_slow"
    assert r.suspects[0].id == fault["component"]["id"]
    assert "again and again" in r.summary
    assert r.first_seen_ns >= fault["onset_ns"]


@pytest.mark.slow
def test_a_gpu_slow_one_iteration_in_two_is_named_not_its_host(tmp_path):
    """3.9x slower one iteration in two: its group's pace is behind in every bucket, as a slow
    host's would be, but the GPU alone is late inside the group's kept calls (in half of them),
    which explains the group's pace. Its first episode is its first slow iteration, not a
    sample of the first iterations just above the threshold."""
    reports, truth, _ = simulate_and_diagnose(tmp_path, _hard_case("int-slow_gpu-512-0"))
    [fault] = truth["faults"]
    assert fault["intermittent"] == {"every": 2, "on": 1}
    [r] = reports
    assert r.kind == "noncomm_slow"
    assert [s.id for s in r.suspects] == [fault["component"]["id"]]
    # (within its first two slow iterations)
    two_later = truth["iteration_start_ns"][fault["onset_iteration"] + 3]
    assert fault["onset_ns"] <= r.first_seen_ns < two_later
