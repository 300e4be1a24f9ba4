"""`c4 lab run -- SCRIPT`: one torchrun node per host namespace, each rank told its host, GPU,
NIC and sidecar, gloo bound to the host's fabric interface, rendezvous at host 0's address."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from labsupport import lab_fixture

from c4.lab.layout import LabSpec

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.multiprocess]

# Records what a rank was given and where its TCP store connection comes from (no torch import).
SCRIPT = r"""
import json, os, socket, sys
out = sys.argv[1]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "C4_HOST", "C4_GPU", "C4_NIC",
        "C4_JOB", "C4_SIDECAR_SOCKET", "GLOO_SOCKET_IFNAME")
info = {k: os.environ.get(k) for k in keys}
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
info["local_addr"] = s.getsockname()[0]
s.close()
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as fh:
    json.dump(info, fh)
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory, no_shared_lab):
    yield from lab_fixture(tmp_path_factory.mktemp("lab"), LabSpec(hosts=2, gpus_per_host=2),
                           services=False)


def test_run_gives_every_rank_its_place_on_the_fabric(lab, tmp_path):
    (tmp_path / "show_env.py").write_text(SCRIPT)
    out = subprocess.run([sys.executable, "-m", "c4", "lab", "run", "--lab-dir", lab["lab_dir"],
                          "--job", "envjob", "--timeout", "120", "--", str(tmp_path /
                                                                             "show_env.py"),
                          str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)}
    for r, info in ranks.items():
        host = f"node00{r // 2}"
        assert info["C4_HOST"] == host and info["C4_GPU"] == f"{host}/gpu{r % 2}"
        assert info["C4_NIC"] == f"{host}/nic0" and info["C4_JOB"] == "envjob"
        assert info["WORLD_SIZE"] == "4" and info["GLOO_SOCKET_IFNAME"] == "fab0"
        assert info["MASTER_ADDR"] == lab["hosts"]["node000"]["addr"]
        assert info["local_addr"] == lab["hosts"][host]["addr"]  # really in its namespace
        assert Path(info["C4_SIDECAR_SOCKET"]).parent.name == host
    st = json.loads((Path(lab["lab_dir"]) / "lab.json").read_text())
    assert st["jobs"][-1]["job"] == "envjob" and st["jobs"][-1]["world_size"] == 4
