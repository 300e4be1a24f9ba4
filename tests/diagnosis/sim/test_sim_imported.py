"""c4 sim --topology: the simulator on an imported topology (the recorded NDR fat-tree and a
Slurm tree): GPUs added to fabric-only hosts, the hosts of the common shape kept, capacities
filled, faults landing on the imported fabric's components."""

from __future__ import annotations

import json

import pytest
from simtrace_helpers import run

from c4.topology import Topology
from c4.topology.importers.ibnetdiscover import import_ibnetdiscover
from c4.topology.importers.slurm_conf import import_slurm_conf
from diagnosis.sim import FaultSpec, SimConfig, SimError, Simulation
from diagnosis.sim.imported import fit
from diagnosis.sim.model import build_topology
from tests.support.topology_fixtures import topo_fixture


@pytest.fixture(scope="module")
def ndr_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ndr") / "ndr.json"
    Topology(import_ibnetdiscover(
        topo_fixture("ibnetdiscover_ndr_fattree_topograph_example.out")).graph).save(path)
    return path


def test_fit_adds_gpus_and_keeps_the_common_shape(ndr_file):
    topo, notes = fit(Topology.load(ndr_file), 512, 8)
    hosts = topo.hosts()
    assert len(hosts) == 64 and all(len(topo.nics(h)) == 4 for h in hosts)
    assert all(len(topo.gpus(h)) == 8 for h in hosts)
    # GPU i on NIC i*4/8 of the host's NICs in natural order
    assert topo.nic_of_gpu("a06-p1-dgx-02-c01/gpu5") == "a06-p1-dgx-02-c01/HCA-5"
    assert topo.graph.edges["a06-p1-dgx-02-c01/gpu5", "a06-p1-dgx-02-c01/HCA-5"]["gbps"] == 400
    assert len(topo.switches()) == 40
    assert notes[0].startswith("191 host(s) without GPUs got 8 each")
    assert "64 host(s) kept, 127 left out (most common shape: 4 cabled NICs)" in notes[1]
    with pytest.raises(SimError, match="needs 200 hosts of 8 GPUs"):
        fit(Topology.load(ndr_file), 1600, 8)


def test_fit_fills_capacities_of_a_slurm_tree():
    g = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_small.conf")).graph
    topo, notes = fit(Topology(g), 40 * 8, 8, nic_gbps=100)
    assert topo.capacity("leaf100~peta10000/nic") == 100
    # non-blocking: a leaf's 20 NICs on its one uplink, a group's 10 leaves on the root's
    assert topo.capacity("grp10~leaf100") == 2000
    assert topo.capacity("grp10~root") == 20000
    assert any("non-blocking" in n for n in notes)
    topo, _ = fit(Topology(g), 40 * 8, 8, uplink_gbps=800)
    assert topo.capacity("grp10~root") == 800


def test_sim_on_the_ndr_fat_tree(tmp_path, ndr_file):
    # 32 hosts: more than one leaf group of the fat tree, so traffic crosses the spines
    tr = run(tmp_path, gpus=256, iterations=8, microbatches=2, seed=3, gc_rate=0.0,
             checkpoint_every=0, congestion_rate=0.0, topology=str(ndr_file),
             faults=(FaultSpec.parse("slow_switch:spine@4,slow=3"),))
    topo = json.loads((tmp_path / "topology.json").read_text())
    ids = {n["id"] for n in topo["nodes"]}
    fault = tr.truth["faults"][0]
    assert fault["component"]["type"] == "switch" and fault["component"]["id"] in ids
    assert "IBSPINE" in fault["component"]["id"] and fault["observable"]
    assert sum(n["kind"] == "host" for n in topo["nodes"]) == 32
    assert {r["host"] for r in tr.ranks.values()} <= ids


def test_topology_options_that_clash(ndr_file):
    with pytest.raises(SimError, match="--nics-per-host"):
        SimConfig(topology="t.json", nics_per_host=2)
    with pytest.raises(SimError, match="cannot read topology file"):
        build_topology(SimConfig(gpus=64, topology="/nonexistent/t.json"))
    with pytest.raises(SimError, match="crosses no core switch on the imported topology n"):
        build = SimConfig(gpus=64, iterations=4, topology=str(ndr_file),
                          faults=(FaultSpec.parse("slow_switch:core"),))
        Simulation(build)
