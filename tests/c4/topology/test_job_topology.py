"""A job's topology assembled from its hosts' discovery (recorded tool outputs through the runner
the sidecar uses) and a fabric file: ranks placed on GPUs and NICs, conflicts and unmatched names
reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from c4.topology.discover import discover_host, recorded_runner
from c4.topology.importers.slurm_conf import import_slurm_conf
from c4.topology.job import ANNOUNCED, DISCOVERED, UNPLACED, assemble_job
from c4.topology.model import Topology
from c4.topology.show import job_text
from diagnosis.store import RankRecord
from tests.support.topology_fixtures import recorded_outputs, topo_fixture


@pytest.fixture(scope="module")
def internals(tmp_path_factory):
    """Two hosts discovered from the recorded A800 matrix and DGX H100 ibdev2netdev (mlx5_1 and
    mlx5_2 down), through the recorded-outputs runner, on an empty sysfs."""
    folder = recorded_outputs(tmp_path_factory.mktemp("outputs"))
    empty = tmp_path_factory.mktemp("sys")
    run = recorded_runner(folder)
    return {h: discover_host(run, empty, hostname=h) for h in ("peta10000", "peta10020")}


@pytest.fixture(scope="module")
def slurm() -> Topology:
    return Topology(import_slurm_conf(topo_fixture("slurm_topology_conf_tree_small.conf")).graph)


def rank(r: int, host: str, device: str = "", gpu: str = "", nic: str = "") -> RankRecord:
    return RankRecord("j", 0, r, 8, host, local_rank=r % 8, gpu=gpu, nic=nic,
                      cuda_device=device)


def messages(jt) -> list[str]:
    return [str(i) for i in jt.issues]


def test_ranks_are_placed_from_the_discovered_pairing(internals, slurm):
    ranks = [rank(0, "peta10000", "1"), rank(1, "peta10000", "7"),
             rank(2, "peta10020", "3", nic="peta10020/mlx5_3"), rank(3, "peta10040"),
             rank(4, "ghost01", "0", gpu="ghost01/gpu0"), rank(5, "peta10000", "9")]
    jt = assemble_job("j", ranks, internals, slurm, "topology.conf")
    p = jt.places
    # GPU1 is PIX to mlx5_0; GPU7 is PIX to mlx5_2 (down) and mlx5_3
    assert (p[0].gpu, p[0].nic, p[0].source) == ("peta10000/gpu1", "peta10000/mlx5_0",
                                                 DISCOVERED)
    assert (p[1].gpu, p[1].nic) == ("peta10000/gpu7", "peta10000/mlx5_3")
    # GPU3's nearest NIC (mlx5_1) is down: it shares mlx5_0; the announced NIC loses
    assert (p[2].gpu, p[2].nic, p[2].source) == ("peta10020/gpu3", "peta10020/mlx5_0",
                                                 DISCOVERED)
    assert (p[3].gpu, p[3].nic, p[3].source) == (None, None, UNPLACED)
    assert (p[4].gpu, p[4].source) == ("ghost01/gpu0", ANNOUNCED)
    assert (p[5].gpu, p[5].source) == (None, UNPLACED)
    assert jt.discovered == ["peta10000", "peta10020"]
    assert jt.undiscovered == ["ghost01", "peta10040"]
    text = messages(jt)
    assert ("rank 2 announces NIC peta10020/mlx5_3 but its host says peta10020/mlx5_0: using "
            "peta10020/mlx5_0 (unset C4_GPU/C4_NIC to let discovery place ranks)") in text
    assert any(t.startswith("host(s) ghost01 of job j were neither discovered nor in the "
                            "fabric file") for t in text)
    assert "rank 5 runs on GPU 9 of peta10000, which lists GPUs 0, 1, 2, 3, … (4 more)" in text
    # the merge's own report: the Slurm placeholder NIC gave way to the discovered NICs
    assert any("named only its switch (leaf100)" in t for t in text)


def test_the_assembled_topology_joins_discovered_nics_to_the_fabric(internals, slurm):
    jt = assemble_job("j", [rank(0, "peta10000", "1"), rank(1, "peta10020", "1")], internals,
                      slurm, "topology.conf")
    topo = jt.topology
    assert topo is not slurm and "peta10000/nic" not in topo.graph
    assert "peta10040/nic" in topo.graph           # hosts outside the job keep the fabric's
    assert topo.nic_of_gpu("peta10020/gpu1") == "peta10020/mlx5_0"
    (path,) = topo.paths("peta10000/mlx5_0", "peta10020/mlx5_0")
    assert path == ["peta10000/mlx5_0", "leaf100", "grp10", "leaf101", "peta10020/mlx5_0"]
    assert len(topo.gpus()) == 16 and jt.fabric == "topology.conf"
    obj = jt.to_json()
    assert obj["counts"]["gpus"] == 16 and "topology" not in obj
    assert jt.to_json(with_graph=True)["topology"]["nodes"]


def test_without_a_fabric_the_hosts_alone_make_the_topology(internals):
    jt = assemble_job("j", [rank(0, "peta10000", "7")], internals)
    assert jt.fabric is None and jt.topology.hosts() == ["peta10000"]
    assert jt.places[0].nic == "peta10000/mlx5_3"


def test_nothing_discovered_keeps_the_fabric_and_announced_places(slurm):
    jt = assemble_job("j", [rank(0, "peta10000", "1", gpu="peta10000/gpu1")], {}, slurm)
    assert jt.topology is slurm and jt.discovered == []
    assert jt.places[0].source == ANNOUNCED
    assert assemble_job("j", [rank(0, "x")], {}).topology is None


def test_hosts_match_by_short_name_and_uuids_are_reported(internals):
    ranks = [rank(0, "Peta10000.cluster", "GPU-5f3e0c2a"), rank(1, "Peta10000.cluster", "2")]
    jt = assemble_job("j", ranks, internals)
    text = messages(jt)
    assert "job host Peta10000.cluster is discovered host peta10000 (same short name)" in text
    assert any(t.startswith("rank 0 runs on GPU 'GPU-5f3e0c2a' (a UUID") for t in text)
    assert jt.places[1].gpu == "Peta10000.cluster/gpu2"
    two = {"n1.a": replace(internals["peta10000"], host="n1.a"),
           "n1.b": replace(internals["peta10000"], host="n1.b")}
    jt = assemble_job("j", [rank(0, "n1", "0")], two)
    assert jt.discovered == [] and any("matches the discovered hosts n1.a, n1.b" in t
                                       for t in messages(jt))


def test_text_report(internals, slurm):
    jt = assemble_job("j", [rank(0, "peta10000", "1"), rank(1, "ghost01")], internals, slurm,
                      "topology.conf")
    text = job_text(jt.to_json(), max_ranks=1)
    lines = text.splitlines()
    assert lines[0] == "job j: 2 hosts, 1 discovered; fabric: topology.conf"
    assert lines[1].startswith("topology: 400 hosts, 8 GPUs, ")
    assert "not discovered: ghost01" in lines
    assert "ranks: 2 (1 discovered, 1 none)" in lines
    assert lines[lines.index("ranks: 2 (1 discovered, 1 none)") + 2].split() == [
        "0", "peta10000", "peta10000/gpu1", "peta10000/mlx5_0", "discovered"]
    assert "  … 1 more ranks (--format json lists all)" in lines
    assert any(line.startswith("warning: host(s) ghost01") for line in lines)
    short = job_text(jt.to_json(), max_issues=1).splitlines()
    assert short[-2].startswith("warning: ")
    assert short[-1] == (f"… {len(jt.issues) - 1} more issues "
                         f"({sum(i.level == 'warning' for i in jt.issues) - 1} warnings; "
                         "--format json lists all)")


def test_running_ranks_keep_the_nic_they_started_with(tmp_path, internals):
    from c4.topology.job import join_hosts, place_ranks

    folder = recorded_outputs(tmp_path / "outputs")
    ibdev = folder / "ibdev2netdev.txt"
    ibdev.write_text(ibdev.read_text().replace("ibp24s0 (Up)", "ibp24s0 (Down)"))
    now = {"peta10000": discover_host(recorded_runner(folder), tmp_path / "nosys",
                                      hostname="peta10000")}
    ranks = [rank(0, "peta10000", "1"), rank(1, "peta10000", "7")]
    before = assemble_job("j", ranks, internals)
    jt = join_hosts("j", ["peta10000"], now)
    place_ranks(jt, ranks)                      # a fresh start: GPU1 pairs with mlx5_3 now
    assert jt.places[0].nic == "peta10000/mlx5_3"
    place_ranks(jt, ranks, before.places)       # the running ranks keep theirs
    assert jt.places[0].nic == "peta10000/mlx5_0" and jt.places[1].nic == "peta10000/mlx5_3"
    assert messages(jt)[-1] == ("rank 0 keeps NIC peta10000/mlx5_0, the one its GPU used when "
                                "it started (peta10000 now pairs peta10000/gpu1 with "
                                "peta10000/mlx5_3)")
