"""End to end in the lab: a real DP x PP torchrun job across four host namespaces reports to the
live daemon through the sidecars; a fault injected into the fabric or a rank is localized by the
daemon to the injected component (as the lab's ground truth accepts it)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from labsupport import lab_fixture

from c4.lab.faults import clear, inject
from c4.lab.lab import EXAMPLE, start_job
from c4.lab.layout import LabSpec
from c4.lab.state import read
from c4.lab.truth import truth
from c4.processes import wait_for

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.multiprocess, pytest.mark.slow]

SPEC = LabSpec(hosts=4, gpus_per_host=2)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    yield from lab_fixture(tmp_path_factory.mktemp("lab"), SPEC, services=True)


@pytest.fixture(scope="module")
def job(lab):
    lab_dir = Path(lab["lab_dir"])
    name, services = start_job(lab_dir, EXAMPLE, job="diag", env={"C4_LAB_STEPS": "100000"})
    try:
        # rank 4 (node002: stage 1, replica 0) prints every 10 steps: a baseline of 40 steps
        wait_for(lambda: "step 40:" in services[2].output() or not services[2].running(), 240,
                 interval=0.5, what="40 steps of the lab job")
        assert services[2].running(), services[2].output()[-3000:]
        yield name
    finally:
        for s in services:
            s.kill()


def _report_ids(lab, job: str) -> set[str]:
    from diagnosis.client import DaemonClient

    with DaemonClient(lab["daemon"]["address"]) as client:
        return {r.id for r in client.faults(job)}


def _localized(lab, job: str, fault: dict, kind: str, before: set[str],
               timeout: float = 90) -> dict:
    """Wait for a new report (not among ``before``) of ``kind`` whose top-scored suspects
    include a component the ground truth accepts. (A report's first_seen_ns is the estimated
    onset of its evidence, which may precede the injection by a few iterations.)"""
    from diagnosis.client import DaemonClient

    accept = {(a["type"], a["id"]) for a in fault["accept"]}
    seen: list[str] = []

    def found():
        with DaemonClient(lab["daemon"]["address"]) as client:
            reports = client.faults(job)
        seen[:] = [f"{r.kind}: {r.summary[:160]}" for r in reports]
        for r in reports:
            if r.kind != kind or r.id in before or not r.suspects:
                continue
            top = max(s.score for s in r.suspects)
            if accept & {(s.type, s.id) for s in r.suspects if s.score == top}:
                return r
        return None

    try:
        return wait_for(found, timeout, interval=1.0, what=f"a {kind} report on {accept}")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; reports: {seen}") from None


def test_slow_gpu_is_localized_to_that_gpu(lab, job):
    lab_dir = Path(lab["lab_dir"])
    before = _report_ids(lab, job)
    rec = inject(lab_dir, "slow-gpu", "node001/gpu1", cpu_pct=3)
    try:
        fault = next(f for f in truth(read(lab_dir))["faults"] if f["onset_ns"] ==
                     int(rec["injected_at"] * 1e9))
        assert ("gpu", "node001/gpu1") in {(a["type"], a["id"]) for a in fault["accept"]}
        report = _localized(lab, job, fault, "noncomm_slow", before)
        assert report.suspects[0].id == "node001/gpu1"
    finally:
        clear(lab_dir)


def test_slow_link_is_localized_to_that_link(lab, job):
    lab_dir = Path(lab["lab_dir"])
    time.sleep(5)  # the job back at speed after the previous test's fault
    before = _report_ids(lab, job)
    rec = inject(lab_dir, "slow-link", "leaf01~node003/nic0", rate_mbit=10)
    try:
        fault = next(f for f in truth(read(lab_dir))["faults"] if f["onset_ns"] ==
                     int(rec["injected_at"] * 1e9))
        _localized(lab, job, fault, "comm_slow", before)
    finally:
        clear(lab_dir)
