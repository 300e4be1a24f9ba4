"""The whole probing flow in the fault lab: a 4-host leaf/spine lab of network namespaces, one
host's cable slowed with ``c4 lab``'s own slow-link fault, ``c4 probe bisect`` over the lab's
host ids (gloo ranks inside the host namespaces, the lab topology's link capacities as the
expectation) finding that host and re-scoring a fault report with its verdicts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from c4.report import FaultReport, Suspect, reports_to_json
from diagnosis.probes.plans import CLEARED, CONFIRMED

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.multiprocess]

REPO = Path(__file__).resolve().parents[3]
SLOW_HOST = "node001"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the lab needs root: network namespaces, tc")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool!r} missing: scripts/system-deps.sh installs it")
    try:
        from c4.lab import fabric, faults
        from c4.lab.lab import session
        from c4.lab.layout import LabSpec
    except ImportError as exc:
        pytest.skip(f"the lab module lacks what this test needs: {exc}")
    if not hasattr(faults, "inject") or "slow-link" not in getattr(faults, "KINDS", ()):
        pytest.skip("the lab module has no slow-link fault")
    if any(fabric.leftovers().values()):
        pytest.skip("a lab (c4l-*) is already up on this machine; not touching it")
    lab_dir = tmp_path_factory.mktemp("lab")
    with session(lab_dir, LabSpec(hosts=4, gpus_per_host=1), services=False) as st:
        # a tenth of the cable's 400 Mbit/s, both directions
        faults.inject(lab_dir, "slow-link", f"{SLOW_HOST}/nic0", rate_mbit=40)
        yield st


def _c4(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "c4", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO), env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow  # five probes of ~10 s each (rank start-up dominates on this machine)
def test_bisect_over_lab_hosts_finds_the_slowed_cable(lab, tmp_path):
    report = FaultReport("comm_slow", (Suspect("link", "leaf00~node000/nic0", 0.6),
                                       Suspect("nic", f"{SLOW_HOST}/nic0", 0.5)), 1,
                         "transfers between node000 and node001 are slow")
    reports = tmp_path / "reports.json"
    reports.write_text(json.dumps(reports_to_json([report])))
    out = _c4("probe", "bisect", "node000", "node001", "node002", "node003", "--lab-dir",
              lab["lab_dir"], "--bytes", str(1 << 20), "--iters", "3", "--reports",
              str(reports), "--format", "json")
    assert out.returncode == 1, out.stderr  # 1: culprits found
    doc = json.loads(out.stdout)
    assert doc["culprits"] == [SLOW_HOST], doc["reason"]
    status = {v["host"]: v["status"] for v in doc["verdicts"]}
    assert status == {"node000": CLEARED, SLOW_HOST: CONFIRMED, "node002": CLEARED,
                      "node003": CLEARED}
    # the topology's expectation: a 400 Mbit/s cable is 0.05 GB/s
    assert all(v["expected_GBps"] == pytest.approx(0.05) for v in doc["verdicts"])
    slow = next(v for v in doc["verdicts"] if v["host"] == SLOW_HOST)
    assert slow["measured_GBps"] < 0.04 / 8 * 1.5  # the 40 Mbit/s shaper bounds it
    healthy = [s["busbw_GBps"] for s in doc["steps"] if SLOW_HOST not in s["hosts"]]
    assert healthy and min(healthy) > 4 * slow["measured_GBps"]
    # the report re-scored: node000's cable cleared, node001's NIC confirmed
    (adjusted,) = doc["reports"]
    assert adjusted["suspects"] == [{"type": "nic", "id": f"{SLOW_HOST}/nic0", "score": 0.75}]
    assert [p["host"] for p in adjusted["evidence"]["probes"]] == list(status)


def test_pair_in_the_lab_table(lab):
    out = _c4("probe", "pair", "node002", "node003", "--lab-dir", lab["lab_dir"], "--bytes",
              str(1 << 20), "--iters", "3")
    assert out.returncode == 0, out.stderr
    assert "node002+node003" in out.stdout and "links allow 0.05 GB/s" in out.stdout
