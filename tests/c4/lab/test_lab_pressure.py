"""Host-pressure faults in the lab: cpu-contention and memory-pressure put a host's ranks (a
fake rank here) under pressure that the host's cgroup v2 group reports as PSI, the file its
sidecar reads; clear undoes them (burners killed, groups removed, the rank left running).
The full path, a slow report whose cause is the host's CPU pressure, is in
test_lab_diagnosis.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from labsupport import fake_rank, skip_unless_root

from c4.lab import fabric
from c4.lab.faults import clear, inject
from c4.lab.lab import down, up
from c4.lab.layout import LabSpec
from c4.lab.procs import CGROUP_ROOT, alive, host_psi_group
from c4.processes import wait_for
from collectors.health.host import parse_psi

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.usefixtures("no_shared_lab")]

SMALL = LabSpec(hosts=2, gpus_per_host=1, hosts_per_leaf=1, spines=2)


def _psi(resource: str) -> float:
    path = host_psi_group("node001") / f"{resource}.pressure"
    return parse_psi(path.read_text(), str(path)).some.avg10


def test_host_pressure_shows_in_the_hosts_psi_and_clears(tmp_path: Path) -> None:
    skip_unless_root()
    if any(fabric.leftovers().values()):
        pytest.skip("a lab (c4l-*) is already up on this machine; not touching it")
    lab_dir = tmp_path / "lab"
    st = up(lab_dir, SMALL, services=False)
    try:
        with fake_rank(st, "node001", 0, 1) as rank:
            mem = inject(lab_dir, "memory-pressure", "node001", memory_mb=32)
            assert mem["pids"] == [rank.pid] and mem["params"]["host"] == "node001"
            group = CGROUP_ROOT / "memory" / f"c4l-f{mem['id']}"
            assert str(rank.pid) in (group / "cgroup.procs").read_text().split()
            wait_for(lambda: _psi("memory") > 0, 40, interval=0.5,
                     what="memory pressure in node001's group")
            [hog] = mem["undo"]["burners"]
            clear(lab_dir)
            assert not alive(hog) and not group.exists() and rank.poll() is None
            assert not Path(mem["undo"]["files"][0]).exists()
            cores = os.sched_getaffinity(rank.pid)
            cpu = inject(lab_dir, "cpu-contention", "node001", cpu_pct=20, burners=1)
            [burner] = cpu["undo"]["burners"]
            pinned = {cpu["params"]["core"]}
            assert os.sched_getaffinity(rank.pid) == os.sched_getaffinity(burner) == pinned
            wait_for(lambda: _psi("cpu") > 20, 40, interval=0.5,
                     what="CPU pressure in node001's group")
            clear(lab_dir)
            assert not alive(burner) and rank.poll() is None
            assert os.sched_getaffinity(rank.pid) == cores
    finally:
        down(lab_dir)
    assert not any(fabric.leftovers().values()), fabric.leftovers()
