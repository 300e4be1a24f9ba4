"""Merging layers: the fabric (ibnetdiscover, Slurm, LLDP) with each host's GPUs and NICs, names
mapped by device, interface and GUID; conflicts and unmatched names reported, never dropped."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from c4.topology.host_internals import GpuInfo, HostInternals, NicInfo
from c4.topology.importers.host import read_internals, to_fabric
from c4.topology.importers.ibnetdiscover import import_ibnetdiscover
from c4.topology.importers.merge import merge
from c4.topology.importers.slurm_conf import import_slurm_conf
from c4.topology.importers.sources import ImportOptions, run_import
from c4.topology.model import Topology
from tests.support.topology_fixtures import topo_fixture

NDR = "ibnetdiscover_ndr_fattree_topograph_example.out"


@pytest.fixture(scope="module")
def fabric() -> nx.Graph:
    return import_ibnetdiscover(topo_fixture(NDR)).graph


def host(name: str, nics: list[NicInfo], pairs: dict[int, str]) -> nx.Graph:
    hi = HostInternals(name, [GpuInfo(i, nic, "PIX") for i, nic in pairs.items()], nics)
    return to_fabric([hi], "test").graph


def dgx(name: str, guids: dict[str, str] | None = None) -> nx.Graph:
    """A host with the four compute HCAs the fabric's mlx5-named hosts have, GPU 2i and 2i+1
    on the i-th."""
    devs = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    nics = [NicInfo(d, ibdev=d, netdev=f"ib{i}", gbps=400.0, guid=(guids or {}).get(d))
            for i, d in enumerate(devs)]
    return host(name, nics, {g: devs[g // 2] for g in range(8)})


def texts(issues) -> list[str]:
    return [str(i) for i in issues]


def test_host_pairing_joins_the_fabric_by_device_name(fabric):
    res = merge(fabric, dgx("a08-p1-dgx-04-c01"), "host")
    g = res.graph
    assert g.has_edge("a08-p1-dgx-04-c01/gpu7", "a08-p1-dgx-04-c01/mlx5_5")
    assert g.has_edge("a08-p1-dgx-04-c01/mlx5_5", "A09-P1-IBLEAF-04-04")
    assert g.nodes["a08-p1-dgx-04-c01/mlx5_5"]["netdev"] == "ib3"
    assert len([n for n in g.adj["a08-p1-dgx-04-c01"]]) == 12       # 4 NICs, 8 GPUs
    topo = Topology(g)
    assert topo.nic_of_gpu("a08-p1-dgx-04-c01/gpu0") == "a08-p1-dgx-04-c01/mlx5_0"
    assert not [i for i in res.issues if i.level == "warning"]


def test_unmatched_nic_names_are_reported(fabric):
    """The fabric calls this host's HCAs HCA-1..6 (node descriptions), the host mlx5_N: no
    common name and no GUID, so nothing joins, and the warning says so."""
    res = merge(fabric, dgx("a06-p1-dgx-02-c01"), "host")
    warn = [t for t in texts(res.issues) if "match none of its NICs" in t]
    assert len(warn) == 1
    assert "mlx5_0, mlx5_1, mlx5_4, mlx5_5" in warn[0] and "HCA-1, HCA-2, HCA-5, HCA-6" in warn[0]
    g = res.graph
    assert "a06-p1-dgx-02-c01/mlx5_0" in g
    assert not any(g.nodes[n]["kind"] == "switch" for n in g.adj["a06-p1-dgx-02-c01/mlx5_0"])


def test_guids_map_description_labels_to_devices(fabric):
    guids = {"mlx5_0": "e09d7303008594bc", "mlx5_1": "e09d7303008594c0",
             "mlx5_4": "e09d730300857d74", "mlx5_5": "e09d730300857d78"}
    res = merge(fabric, dgx("a06-p1-dgx-02-c01", guids), "host")
    g = res.graph
    assert "a06-p1-dgx-02-c01/HCA-6" not in g       # renamed after its RDMA device
    assert g.has_edge("a06-p1-dgx-02-c01/mlx5_5", "A09-P1-IBLEAF-04-02")
    assert g.has_edge("a06-p1-dgx-02-c01/gpu6", "a06-p1-dgx-02-c01/mlx5_5")
    assert g.edges["a06-p1-dgx-02-c01/mlx5_5", "A09-P1-IBLEAF-04-02"]["ports"] == {
        "A09-P1-IBLEAF-04-02": [1]}
    assert not [i for i in res.issues if i.level == "warning"]


def test_guid_names_a_default_description_hca(fabric):
    """H-e09d730300858d88 (port 6 of leaf 04-02, default description) is this host's mlx5_5."""
    nics = [NicInfo("mlx5_5", ibdev="mlx5_5", guid="e09d730300858d88")]
    res = merge(fabric, host("a06-p1-dgx-02-c06", nics, {0: "mlx5_5"}), "host")
    g = res.graph
    assert "H-e09d730300858d88" not in g and "H-e09d730300858d88/hca" not in g
    assert g.has_edge("a06-p1-dgx-02-c06/mlx5_5", "A09-P1-IBLEAF-04-02")
    assert g.nodes["a06-p1-dgx-02-c06/mlx5_5"]["host"] == "a06-p1-dgx-02-c06"
    assert any("HCA H-e09d730300858d88 (GUID e09d730300858d88) is a06-p1-dgx-02-c06/mlx5_5" in t
               for t in texts(res.issues))
    Topology.from_json(nx.node_link_data(g, edges="links"))     # still a valid topology


def test_conflicts_keep_the_existing_and_are_reported(fabric):
    first = merge(fabric, dgx("a08-p1-dgx-04-c01"), "one").graph
    # a second source pairs GPU 0 with another NIC, names the same GUID on another host, and
    # gives a cable another capacity
    nics = [NicInfo("mlx5_5", ibdev="mlx5_5"), NicInfo("mlx5_9", ibdev="mlx5_9",
                                                       guid="e09d7303007a4bd4")]
    res = merge(first, host("a08-p1-dgx-04-c01", nics[:1], {0: "mlx5_5"}), "two")
    assert res.graph.has_edge("a08-p1-dgx-04-c01/gpu0", "a08-p1-dgx-04-c01/mlx5_0")
    assert not res.graph.has_edge("a08-p1-dgx-04-c01/gpu0", "a08-p1-dgx-04-c01/mlx5_5")
    assert any("gpu0 uses NIC a08-p1-dgx-04-c01/mlx5_0 in the existing topology and "
               "a08-p1-dgx-04-c01/mlx5_5 here" in t for t in texts(res.issues))
    claim = merge(first, host("x1", nics[1:], {}), "three")
    assert any("GUID e09d7303007a4bd4 is NIC a08-p1-dgx-04-c01/mlx5_4" in t
               for t in texts(claim.issues))
    cable = nx.Graph()
    cable.add_node("A09-P1-IBLEAF-04-04", kind="switch")
    cable.add_node("A10-P1-IBSPINE-02", kind="switch")
    cable.add_edge("A09-P1-IBLEAF-04-04", "A10-P1-IBSPINE-02", gbps=400.0)
    res = merge(first, cable, "four")
    assert res.graph.edges["A09-P1-IBLEAF-04-04", "A10-P1-IBSPINE-02"]["gbps"] == 800
    assert any("gbps 800 in the existing topology, 400 here" in t for t in texts(res.issues))


def test_hosts_match_by_short_name(fabric):
    res = merge(fabric, dgx("A08-P1-DGX-04-C01.cluster.local"), "host")
    assert res.graph.has_edge("a08-p1-dgx-04-c01/gpu7", "a08-p1-dgx-04-c01/mlx5_5")
    assert any("taken for 'a08-p1-dgx-04-c01'" in t for t in texts(res.issues))


def test_kind_clash_is_kept_apart():
    a, b = nx.Graph(), nx.Graph()
    a.add_node("x", kind="switch")
    b.add_node("x", kind="host")
    res = merge(a, b, "s")
    assert res.graph.nodes["x"]["kind"] == "switch" and res.graph.nodes["x@host"]["kind"] == "host"
    assert any("added as host x@host" in t for t in texts(res.issues))


def test_slurm_placeholder_gives_way_to_the_real_nics():
    slurm = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_small.conf")).graph
    hosts = to_fabric(read_internals([
        ("peta10000", topo_fixture("nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt")),
        ("peta10000", topo_fixture("ibdev2netdev_dgx_h100_12hca.txt"))]), "host").graph
    res = merge(slurm, hosts, "host")
    g = res.graph
    assert "peta10000/nic" not in g
    # the NICs the GPUs use are cabled to the host's leaf; the others stay off the fabric
    assert g.has_edge("peta10000/mlx5_0", "leaf100") and g.has_edge("peta10000/mlx5_3", "leaf100")
    assert not g.has_edge("peta10000/mlx5_10", "leaf100")
    assert any("named only its switch (leaf100)" in t for t in texts(res.issues))
    assert "peta10001/nic" in g


def test_lldp_interface_names_become_rdma_devices():
    lldp = to_fabric(read_internals([("r1", topo_fixture("lldpctl_json_roce_host_arista.json"))]))
    hi = HostInternals("r1", nics=[NicInfo("mlx5_2", ibdev="mlx5_2", netdev="enp233s0",
                                           gbps=400.0)], gpus=[GpuInfo(0, "mlx5_2", "PIX")])
    res = merge(lldp.graph, to_fabric([hi]).graph, "host")
    g = res.graph
    assert "r1/enp233s0" not in g
    leaf = "txdr-iah13a-r304-lab-prod-roce-leaf-21"
    assert g.has_edge("r1/mlx5_2", leaf) and g.has_edge("r1/gpu0", "r1/mlx5_2")
    assert g.edges["r1/mlx5_2", leaf]["gbps"] == 400          # from the NIC's port rate
    assert g.edges["r1/mlx5_2", leaf]["ports"] == {leaf: ["Ethernet3/1"]}
    assert "r1/eth0" in g                                      # the management port stays


def test_run_import_keeps_every_issue_in_the_file(tmp_path):
    fabric_file = tmp_path / "fabric.json"
    out = run_import("ibnetdiscover", [str(topo_fixture(NDR))])
    out.topology.save(fabric_file)
    matrix = topo_fixture("nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt")
    merged = run_import("host", [f"a06-p1-dgx-02-c01={matrix}"], ImportOptions(), fabric_file)
    saved = json.loads(fabric_file.read_text())["graph"]["import_issues"]
    assert any("default node description" in i["message"] for i in saved)
    issues = merged.topology.graph.graph["import_issues"]
    assert len(issues) == len(saved) + len(merged.issues)
    assert any("match none of its NICs" in i["message"] for i in issues)
