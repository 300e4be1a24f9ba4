"""`c4 lab down` leaves nothing behind, also after a crash (no state file); `down` without a
lab and `up` over leftovers say so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from labsupport import fake_rank, skip_unless_root

from c4.lab import fabric
from c4.lab.faults import inject
from c4.lab.lab import down, up
from c4.lab.layout import LabSpec
from c4.lab.procs import CGROUP_ROOT, alive, lab_processes
from c4.lab.system import LabError

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.usefixtures("no_shared_lab")]

SMALL = LabSpec(hosts=2, gpus_per_host=1, hosts_per_leaf=1, spines=2)


def _nft_tables(ns: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"],
                          capture_output=True, text=True, check=True).stdout


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "c4", "lab", *args], capture_output=True,
                          text=True, timeout=120)


def test_down_removes_everything_even_after_a_crash(tmp_path):
    skip_unless_root()
    if any(fabric.leftovers().values()):
        pytest.skip("a lab (c4l-*) is already up on this machine; not touching it")
    lab_dir = tmp_path / "lab"
    st = up(lab_dir, SMALL, services=False)
    try:
        assert set(fabric.leftovers()["namespaces"]) == {
            "c4l-node000", "c4l-node001", "c4l-leaf00", "c4l-leaf01", "c4l-spine0",
            "c4l-spine1"}
        with fake_rank(st, "node000", 0, 0) as proc:
            inject(lab_dir, "lossy-link", "leaf00~node000/nic0", loss_pct=10)
            inject(lab_dir, "slow-gpu", "node000/gpu0")
            hang = inject(lab_dir, "hang", "node000", duration=600)  # with a timer process
            assert "c4l-f1" in _nft_tables("c4l-leaf00")
            assert (CGROUP_ROOT / "cpu" / "c4l-f2").exists()
            assert (CGROUP_ROOT / "freezer" / "c4l-f3").exists()
            # the crash: the state file is lost, only the prefix is left to go by
            (lab_dir / "lab.json").unlink()
            msg = down(tmp_path / "elsewhere")
            assert "leftovers" in msg
            assert proc.wait(10) is not None  # a frozen rank was thawed and killed
        assert fabric.leftovers() == {"namespaces": [], "links": [], "cgroups": [],
                                      "nft_tables": [], "mounts": []}
        assert lab_processes() == []
        assert not alive(hang["timer_pid"])
    finally:
        fabric.teardown(str(lab_dir))
    out = _cli("down", "--lab-dir", str(lab_dir))
    assert out.returncode == 0 and "no lab is up" in out.stdout


def test_cli_up_over_leftovers_and_inject_without_a_lab(tmp_path):
    skip_unless_root()
    if any(fabric.leftovers().values()):
        pytest.skip("a lab (c4l-*) is already up on this machine; not touching it")
    out = _cli("inject", "slow-link", "leaf00~spine0", "--lab-dir", str(tmp_path / "none"))
    assert out.returncode == 1 and "no lab is up" in out.stderr
    subprocess.run(["ip", "netns", "add", "c4l-stray"], check=True)
    subprocess.run(["nft", "add", "table", "inet", "c4l-stray"], check=True)
    try:
        with pytest.raises(LabError, match="leftovers"):
            up(tmp_path / "lab", SMALL, services=False)
        out = _cli("down", "--lab-dir", str(tmp_path / "lab"))
        assert out.returncode == 0 and "1 namespaces" in out.stdout, out.stdout
        assert "1 nft tables" in out.stdout
    finally:
        subprocess.run(["ip", "netns", "del", "c4l-stray"], capture_output=True)
        subprocess.run(["nft", "delete", "table", "inet", "c4l-stray"], capture_output=True)
    assert fabric.leftovers()["namespaces"] == [] and fabric.root_nft_tables() == []
    out = _cli("up", "--hosts", "2", "--hosts-per-leaf", "1", "--no-services", "--lab-dir",
               str(tmp_path / "lab"))
    try:
        assert out.returncode == 0, out.stderr
        st = json.loads((tmp_path / "lab" / "lab.json").read_text())
        assert list(st["hosts"]) == ["node000", "node001"]
    finally:
        out = _cli("down", "--lab-dir", str(tmp_path / "lab"))
    assert out.returncode == 0 and "lab removed" in out.stdout
    assert Path(tmp_path / "lab" / "last-lab.json").exists()
