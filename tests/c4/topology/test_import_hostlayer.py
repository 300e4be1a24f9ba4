"""Host-layer sources (nvidia-smi topo -m, ibdev2netdev, lldpctl -f json) and cloud/Kubernetes
labels on the recorded samples: GPU-NIC pairing, NIC names, switch ports, tiers."""

from __future__ import annotations

import json

import pytest

from c4.topology.importers import ibdev2netdev, lldp, nvidia_smi
from c4.topology.importers.aws import import_aws
from c4.topology.importers.common import TopologyImportError, counts
from c4.topology.importers.host import read_internals, to_fabric
from c4.topology.importers.k8s import import_k8s
from tests.support.topology_fixtures import topo_fixture

A800 = "nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt"
H800 = "nvidia_smi_topo_m_h800_8gpu_4nic_truncated_paste.txt"
#: NCCL's choice on the A800/H800 hosts: each PIX pair, then the NUMA-local NICs shared evenly
PAIRS_8X4 = {0: ("mlx5_0", "NODE"), 1: ("mlx5_0", "PIX"), 2: ("mlx5_1", "NODE"),
             3: ("mlx5_1", "PIX"), 4: ("mlx5_3", "NODE"), 5: ("mlx5_2", "NODE"),
             6: ("mlx5_3", "NODE"), 7: ("mlx5_2", "PIX")}


def test_a800_crlf_matrix_and_pairing():
    m = nvidia_smi.read_matrix(topo_fixture(A800))
    assert m.gpus == list(range(8)) and m.nics == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert m.distance[(7, "mlx5_3")] == "PIX" and m.distance[(0, "mlx5_2")] == "SYS"
    assert set(m.nvlink.values()) == {"NV8"} and len(m.nvlink) == 28
    assert m.cpus[4] == "32-63,96-127" and m.numa[4] == 1 and not m.issues
    pairs, issues = nvidia_smi.pair_gpus(m)
    assert pairs == PAIRS_8X4
    assert "GPU 0, 2, 4, 5, 6 reach no NIC through PCIe switches alone" in issues[0].message


def test_h800_truncated_paste_reads_the_nic_rows():
    m = nvidia_smi.read_matrix(topo_fixture(H800))
    assert m.nics == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert nvidia_smi.pair_gpus(m)[0] == PAIRS_8X4
    text = [str(i) for i in m.issues]
    assert any(":10:" in t and "no column for NIC0, NIC1, NIC2, NIC3" in t for t in text)
    assert any("CPU affinity of GPU0, GPU1, GPU2, GPU3 is cut" in t for t in text)
    assert 0 not in m.cpus and m.numa[0] == 0


@pytest.mark.parametrize(("name", "gpus", "link"), [
    ("nvidia_smi_topo_m_a100_8gpu_nv12_gpu_only.txt", 8, "NV12"),
    ("nvidia_smi_topo_m_h100_8gpu_nv18_gpu_only.txt", 8, "NV18"),
    ("nvidia_smi_topo_mp_2gpu_pix_rtxpro6000.txt", 2, "PIX"),
])
def test_gpu_only_matrices(name, gpus, link):
    m = nvidia_smi.read_matrix(topo_fixture(name))
    assert m.gpus == list(range(gpus)) and m.nics == [] and set(m.nvlink.values()) == {link}
    assert nvidia_smi.pair_gpus(m) == ({}, [])


def test_ansi_underlined_capture_of_a_single_gpu():
    """The driver 590 capture: many sections, the topo -m header in ESC[4m ... ESC[0m."""
    path = topo_fixture("nvidia_smi_capture_h100_driver590_full.txt", folder="health")
    m = nvidia_smi.read_matrix(path)
    assert m.gpus == [0] and m.nics == [] and m.cpus == {0: "0-19"} and m.numa == {0: 0}


def test_matrix_errors(tmp_path):
    f = tmp_path / "topo.txt"
    f.write_text("no matrix here\n")
    with pytest.raises(TopologyImportError, match="no nvidia-smi topo -m matrix"):
        nvidia_smi.read_matrix(f)
    f.write_text("\tGPU0\tGPU1\tNIC0\tCPU Affinity\n GPU0\t X \tNV4\tPIX\t0-3\n"
                 "GPU1\tNV4\t X \tSYS\t4-7\n")
    m = nvidia_smi.read_matrix(f)
    assert m.nics == ["NIC0"] and any("no 'NIC Legend'" in str(i) for i in m.issues)


def test_ibdev2netdev_crlf_and_verbose(tmp_path):
    ports = ibdev2netdev.read_ports(topo_fixture("ibdev2netdev_dgx_h100_12hca.txt"))
    assert len(ports) == 11
    assert ports[0] == ibdev2netdev.DevicePort("mlx5_0", 1, "ibp24s0", "up")
    assert ports[1].netdev == "enp41s0f0np0" and ports[1].state == "down"
    assert [p.ibdev for p in ports][:3] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    f = tmp_path / "v.txt"
    f.write_text("0000:0c:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) NVIDIA ConnectX-7 fw "
                 "28.39.1002 port 1 (ACTIVE) ==> ibp12s0 (Up)\nmlx4_0 port 2 <===> ib1\n")
    v = ibdev2netdev.read_ports(f)
    assert v[0] == ibdev2netdev.DevicePort("mlx5_0", 1, "ibp12s0", "up", "0000:0c:00.0")
    assert v[1] == ibdev2netdev.DevicePort("mlx4_0", 2, "ib1", None)
    f.write_text("mlx5_0 is here\n")
    with pytest.raises(TopologyImportError, match=r"v.txt:1: not an ibdev2netdev line"):
        ibdev2netdev.read_ports(f)


def test_lldp_json_array_of_interfaces():
    nbrs = lldp.read_neighbors(topo_fixture("lldpctl_json_roce_host_arista.json"))
    assert [n.iface for n in nbrs] == ["eth0", "enp233s0", "enp198s0", "enp137s0"]
    roce = nbrs[1]
    assert roce.switch == "txdr-iah13a-r304-lab-prod-roce-leaf-21"
    assert roce.port == "Ethernet3/1" and roce.chassis_id == "54:0f:2c:12:0a:cd"
    assert roce.bridge is True and "7060DX5" in roce.switch_descr
    assert nbrs[0].port == "Ethernet27" and nbrs[0].port_descr == "SERVER MGMT"


def test_lldp_single_interface_object_and_json0(tmp_path):
    one = {"lldp": {"interface": {"eth0": {"via": "LLDP", "chassis": {"sw1": {
        "id": {"type": "mac", "value": "aa:bb"}}}, "port": {"id": {"type": "ifname",
                                                                    "value": "Ethernet1"}}}}}}
    j0 = {"lldp": [{"interface": [{"name": "eth1", "via": "LLDP", "chassis": [{
        "id": [{"type": "mac", "value": "cc:dd"}], "name": [{"value": "sw2"}]}],
        "port": [{"id": [{"type": "ifname", "value": "swp3"}], "descr": [{"value": "x"}]}]}]}]}
    none = {"lldp": {}}
    got = [lldp.parse(json.dumps(doc), "t") for doc in (one, j0, none)]
    assert got[0] == [lldp.Neighbor("eth0", "sw1", "aa:bb", "Ethernet1", None, None, "LLDP")]
    assert got[1] == [lldp.Neighbor("eth1", "sw2", "cc:dd", "swp3", "x", None, "LLDP")]
    assert got[2] == []


def test_host_files_joined_per_host():
    """nvidia-smi + ibdev2netdev + LLDP of one host: down NICs get no GPU, LLDP's interfaces
    join the RDMA devices that own them."""
    recs = read_internals([("n1", topo_fixture(A800)),
                           ("n1", topo_fixture("ibdev2netdev_dgx_h100_12hca.txt"))])
    hi = recs[0]
    # mlx5_1 and mlx5_2 are down in that ibdev2netdev: their GPUs move to the up NICs
    assert {g.index: g.nic for g in hi.gpus} == {0: "mlx5_0", 1: "mlx5_0", 2: "mlx5_0",
                                                 3: "mlx5_0", 4: "mlx5_3", 5: "mlx5_3",
                                                 6: "mlx5_3", 7: "mlx5_3"}
    assert hi.nic("mlx5_0").netdev == "ibp24s0" and hi.nic("mlx5_1").state == "down"
    fab = to_fabric(recs, "host")
    g = fab.graph
    assert counts(g)["gpus"] == 8 and counts(g)["nics"] == 11
    assert g.edges["n1/gpu7", "n1/mlx5_3"]["pcie"] == "PIX"
    assert any("mlx5_1, mlx5_2 are down" in str(i) for i in fab.issues)


def test_lldp_host_fragment():
    fab = to_fabric(read_internals([("r1", topo_fixture("lldpctl_json_roce_host_arista.json"))]))
    g = fab.graph
    assert counts(g) == {"hosts": 1, "gpus": 0, "nics": 4, "switches": 4,
                         "tiers": {"leaf": 4}, "links": 4, "cables": 4}
    assert g.edges["r1/enp233s0", "txdr-iah13a-r304-lab-prod-roce-leaf-21"]["ports"] == {
        "txdr-iah13a-r304-lab-prod-roce-leaf-21": ["Ethernet3/1"]}
    assert g.nodes["r1/enp233s0"]["netdev"] == "enp233s0"


def test_host_outputs_need_their_host():
    with pytest.raises(TopologyImportError, match="HOST=FILE or pass --host"):
        read_internals([(None, topo_fixture(A800))])


def test_aws_instances_and_network_nodes():
    fab = import_aws(topo_fixture("aws_ec2_describe_instance_topology_cli_doc_example.json"))
    g = fab.graph
    assert counts(g) == {"hosts": 4, "gpus": 0, "nics": 4, "switches": 8,
                         "tiers": {"core": 2, "leaf": 3, "spine": 3}, "links": 10,
                         "cables": 10}
    assert g.has_edge("i-1111111111example/nic", "nn-3333333333example")
    assert g.has_edge("nn-3333333333example", "nn-2222222222example")
    assert g.nodes["nn-1111111111example"]["tier"] == "core"
    assert g.nodes["i-1111111111example"]["placement_group"] == "my-ml-cpg"
    assert g.nodes["i-444444444example"]["instance_type"] == "trn1.2xlarge"
    assert any("NextToken" in str(i) for i in fab.issues)
    p4de = import_aws(topo_fixture("aws_ec2_describe_instance_topology_p4de.json")).graph
    assert counts(p4de)["switches"] == 3
    assert p4de.has_edge("i-0d7a5c941dc912692/nic", "nn-38464347ecf47e324")


@pytest.mark.parametrize("name", ["k8s_node_labels_topograph_v0.4.0_doc_example.txt",
                                  "k8s_node_labels_topograph_v1_doc_example.txt"])
def test_k8s_label_schemes(name):
    fab = import_k8s(topo_fixture(name), host="node1")
    g = fab.graph
    assert g.has_edge("node1/nic", "s1") and g.has_edge("s1", "s2") and g.has_edge("s2", "s3")
    assert [g.nodes[s]["tier"] for s in ("s1", "s2", "s3")] == ["leaf", "spine", "core"]
    assert g.nodes["node1"]["nvlink_domain"] == "nvl1"


def test_k8s_node_list_json_and_eks_layers(tmp_path):
    doc = {"items": [{"metadata": {"name": f"ip-{i}", "labels": {
        "topology.k8s.aws/network-node-layer-1": "nn-top",
        "topology.k8s.aws/network-node-layer-2": "nn-mid",
        "topology.k8s.aws/network-node-layer-3": f"nn-leaf{i % 2}"}}} for i in range(4)]
        + [{"metadata": {"name": "cpu-0", "labels": {}}}]}
    f = tmp_path / "nodes.json"
    f.write_text(json.dumps(doc))
    fab = import_k8s(f)
    g = fab.graph
    assert g.has_edge("ip-3/nic", "nn-leaf1") and g.nodes["nn-top"]["tier"] == "core"
    assert counts(g)["hosts"] == 5 and counts(g)["switches"] == 4
    assert any("cpu-0" in str(i) for i in fab.issues)
    with pytest.raises(TopologyImportError, match="HOST=FILE or pass --host"):
        import_k8s(topo_fixture("k8s_node_labels_topograph_v1_doc_example.txt"))
