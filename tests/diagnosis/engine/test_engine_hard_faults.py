"""The hard cases of issue 22 on small simulated jobs (128 GPUs, four hosts per leaf so that the
data-parallel rings cross spines): faults that come and go, faults already there when recording
began, several faults at once, and a healthy job under heavy benign noise."""

from __future__ import annotations

import pytest

from tests.support.engine_builders import sim_config, simulate_and_diagnose, top

BASE = {"gpus": 128, "iterations": 30, "microbatches": 2, "seed": 5, "hosts_per_leaf": 4}


def analyze(tmp_path, *faults: str, **kw):
    reports, truth, _ = simulate_and_diagnose(tmp_path, sim_config(BASE, faults, **kw))
    return reports, truth["faults"]


def test_a_nic_slow_one_iteration_in_three_is_named_with_how_often_and_how_much(tmp_path):
    reports, truth = analyze(tmp_path, "slow_nic@6,slow=3,every=3,on=1")
    assert [r.kind for r in reports] == ["comm_slow"]
    r = reports[0]
    assert top(r) in {(a["type"], a["id"]) for a in truth[0]["accept"]}
    assert "again and again" in r.summary and "3.0x slower" in r.summary
    assert r.evidence["recurring"] is True
    assert 0.25 < r.evidence["slow_fraction"] < 0.45 and r.evidence["episodes"] >= 3


def test_a_gpu_slow_at_random_is_named(tmp_path):
    reports, truth = analyze(tmp_path, "slow_gpu@6,slow=2.5,duty=0.3")
    assert [(r.kind, top(r)) for r in reports] == [("noncomm_slow",
                                                    ("gpu", truth[0]["component"]["id"]))]
    assert "again and again" in reports[0].summary
    assert reports[0].evidence["recurring"] is True


@pytest.mark.parametrize("spec", ["slow_link:uplink@0,slow=2", "slow_switch:spine@0,slow=2",
                                  "slow_switch:leaf@0,slow=1.6"])
def test_a_fabric_component_slow_from_the_first_iteration_is_named(tmp_path, spec):
    reports, truth = analyze(tmp_path, spec)
    assert [r.kind for r in reports] == ["comm_slow"]
    assert top(reports[0]) == (truth[0]["component"]["type"], truth[0]["component"]["id"])
    assert "same load" in reports[0].summary


def test_three_faults_at_once_each_get_a_report(tmp_path):
    reports, truth = analyze(tmp_path, "slow_gpu@10,slow=2", "slow_nic@12,slow=2",
                             "slow_switch:spine@0,slow=2")
    named = {(r.kind, top(r)) for r in reports}
    assert len(reports) == 3
    for f in truth:
        assert any((f["expected_report"], (a["type"], a["id"])) in named for a in f["accept"])


def test_a_healthy_job_under_heavy_benign_noise_is_quiet(tmp_path):
    # five times the one-off pauses, a checkpoint every 7 iterations, three times the
    # transient congestion of uplinks
    reports, _ = analyze(tmp_path, gc_rate=0.01, checkpoint_every=7, congestion_rate=0.3,
                         iterations=40)
    assert reports == []
