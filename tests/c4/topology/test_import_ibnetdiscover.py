"""ibnetdiscover imports (default topology file and -p ports report) on the recorded samples
(shared fixtures, topology/SOURCES.md): counts, exact links and capacities, naming, and the
errors of damaged input."""

from __future__ import annotations

import pytest

from c4.errors import FormatError
from c4.topology.importers.common import TopologyImportError, counts
from c4.topology.importers.ib_parse import cable_gbps
from c4.topology.importers.ibnetdiscover import import_ibnetdiscover, read_name_map
from c4.topology.model import Topology
from tests.support.topology_fixtures import topo_fixture

NDR = "ibnetdiscover_ndr_fattree_topograph_example.out"


@pytest.fixture(scope="module")
def ndr():
    return import_ibnetdiscover(topo_fixture(NDR))


def test_ndr_fat_tree_counts(ndr):
    c = counts(ndr.graph)
    # 40 MQM9701 switches: 31 leaves (with HCAs) and 9 spines; 582 CAs of which 40 are SHARP
    # aggregation nodes (left out), 473 named HCAs on 122 hosts and 69 with the default
    # description (one GUID-named host each)
    assert c == {"hosts": 191, "gpus": 0, "nics": 542, "switches": 40,
                 "tiers": {"leaf": 31, "spine": 9}, "links": 811, "cables": 1074}
    topo = Topology(ndr.graph)
    assert topo.index.two_tier
    assert len(topo.switches("leaf")) == 31 and len(topo.switches("spine")) == 9


def test_ndr_exact_links(ndr):
    g = ndr.graph
    # leaf 04-04 port 1 -> "a08-p1-dgx-04-c01 mlx5_5", 4xNDR
    cable = g.edges["A09-P1-IBLEAF-04-04", "a08-p1-dgx-04-c01/mlx5_5"]
    assert cable["gbps"] == 400 and cable["ports"] == {"A09-P1-IBLEAF-04-04": [1]}
    # ports 35 and 36 both go to spine 02 (its ports 32 and 31): one link of two cables
    bundle = g.edges["A09-P1-IBLEAF-04-04", "A10-P1-IBSPINE-02"]
    assert bundle["gbps"] == 800 and bundle["cables"] == 2
    assert bundle["ports"] == {"A09-P1-IBLEAF-04-04": [35, 36], "A10-P1-IBSPINE-02": [32, 31]}
    # leaf 01-01 reaches spine 04 by one cable only (line 1241)
    thin = g.edges["A09-P1-IBLEAF-01-01", "A10-P1-IBSPINE-04"]
    assert thin["gbps"] == 400 and "cables" not in thin
    nic = g.nodes["a08-p1-dgx-04-c01/mlx5_5"]
    assert nic["host"] == "a08-p1-dgx-04-c01" and nic["ibdev"] == "mlx5_5"
    assert nic["guid"] == "e09d7303007a4bd8"
    # "HCA-6" is a node-description label, not a kernel device name
    assert "ibdev" not in g.nodes["a06-p1-dgx-02-c01/HCA-6"]
    assert sorted(g.adj["a06-p1-dgx-02-c01"]) == [f"a06-p1-dgx-02-c01/HCA-{i}"
                                                 for i in (1, 2, 5, 6)]
    leaf = g.nodes["A09-P1-IBLEAF-04-04"]
    assert leaf["tier"] == "leaf" and leaf["sharp"] and leaf["guid"] == "2c5eab0300b87b40"


def test_ndr_default_descriptions_and_sharp_are_reported(ndr):
    g = ndr.graph
    # an HCA left at "MT4129 ConnectX7   Mellanox Technologies" is a host of its own
    assert g.nodes["H-e09d730300858d88/hca"]["guid"] == "e09d730300858d88"
    assert g.edges["A09-P1-IBLEAF-04-02", "H-e09d730300858d88/hca"]["gbps"] == 400
    assert not any("Aggregation" in str(d.get("desc")) for _, d in g.nodes(data=True))
    text = [str(i) for i in ndr.issues]
    assert any("69 HCA(s) keep a default node description" in t and f"{NDR}:2036" in t
               for t in text), text
    assert any("40 SHARP aggregation node(s)" in t for t in text)


def test_manpage_example_dual_port_ca_and_disagreeing_ends():
    fab = import_ibnetdiscover(topo_fixture("ibnetdiscover_manpage_example_rdma_core.txt"))
    assert counts(fab.graph) == {"hosts": 4, "gpus": 0, "nics": 4, "switches": 2,
                                 "tiers": {"leaf": 2}, "links": 5, "cables": 7}
    g = fab.graph
    # the CA with both ports on the ISR9024: one NIC, two cables (4xSDR each, as the switch
    # lists them: the CA's record says 1xSDR for port 1)
    two = g.edges["S-005442ba00003080", "H-0008f10403960558/hca"]
    assert two["cables"] == 2 and two["gbps"] == 20
    assert two["ports"]["H-0008f10403960558/hca"] == [2, 1]
    # two switches joined by a 4xSDR and a 1xSDR cable (as the ISR9024 lists them)
    assert g.edges["S-005442ba00003080", "S-0008f10400410015"]["gbps"] == 20
    warnings = [str(i) for i in fab.issues if i.level == "warning"]
    assert sum("disagree" in w for w in warnings) == 2
    assert any(":26:" in w and "4xSDR (line 15) vs 1xSDR (line 26)" in w for w in warnings)


def test_ports_report_edr():
    fab = import_ibnetdiscover(topo_fixture("ibnetdiscover_p_edr_infiniband_exporter.txt"))
    g = fab.graph
    assert counts(g) == {"hosts": 3, "gpus": 0, "nics": 3, "switches": 4,
                         "tiers": {"-": 1, "leaf": 2, "spine": 1}, "links": 4, "cables": 4}
    assert g.edges["ib-i1l1s01", "o0001/HCA-1"] == {
        "gbps": 100.0, "ports": {"ib-i1l1s01": [10]}}
    assert g.edges["ib-i1l1s01", "ib-i1l2s01"]["gbps"] == 100
    assert g.nodes["ib-i1l2s01"]["tier"] == "spine"
    # a switch seen only through an unconnected port: no tier, reported
    assert "tier" not in g.nodes["ib-i7l2s01"]
    assert any("reach no NIC (ib-i7l2s01)" in str(i) for i in fab.issues)


def test_ports_report_hdr_stray_spaces_and_aggregation_node():
    fab = import_ibnetdiscover(topo_fixture("ibnetdiscover_p_hdr_infiniband_exporter.txt"))
    g = fab.graph
    assert g.edges["5FB0405-leaf-IB01", "worker20/mlx5_3"]["gbps"] == 200
    assert g.nodes["worker20/mlx5_3"]["ibdev"] == "mlx5_3"
    assert {"5FB0406-spine-IB01", "5FB0406-spine-IB02", "5FB0406-spine-IB03"} <= set(g)
    assert g.nodes["5FB0406-spine-IB03"]["sharp"]
    # a default switch description names no switch: the GUID does
    assert g.nodes["S-0002c9020040f160"]["desc"] == "Infiniscale-IV Mellanox Technologies"
    assert counts(g)["hosts"] == 1


def test_unquoted_name_and_switch_lines_import_with_a_warning():
    fab = import_ibnetdiscover(
        topo_fixture("ibnetdiscover_p_unquoted_name_infiniband_exporter.txt"))
    assert fab.graph.nodes["S-0002c9020040f161"]["desc"] == \
        "Infiniscale-IV Mellanox Technologies"
    assert any("no cables" in str(i) for i in fab.issues)
    fab = import_ibnetdiscover(topo_fixture("ibnetdiscover_switch_lines_gcm_anonymized.txt"))
    assert sorted(fab.graph) == ["switch0001", "switch0002"]
    assert fab.graph.nodes["switch0001"]["guid"] == "0011223344550001"


def test_partial_dump_is_an_error_naming_the_line():
    path = topo_fixture("ibnetdiscover_partial_topograph_example_bad.out")
    with pytest.raises(TopologyImportError) as err:
        import_ibnetdiscover(path)
    assert isinstance(err.value, FormatError) and err.value.line == 10
    msg = str(err.value)
    assert msg.startswith(f"{path}:10: partial output")
    assert "'dgx-gb200-n01-c1 HCA-1'" in msg and "ibstat" in msg


@pytest.mark.parametrize(("text", "line", "words"), [
    ('[1]\t"H-0011"[1]\t\t# "x" lid 1 4xNDR\n', 1, "outside a node record"),
    ('Switch\t8 "S-0001"\t\t# "sw" enhanced port 0 lid 1 lmc 0\n[1]\t"H-00\n', 2,
     "cannot read this switch port line"),
    ('Switch\t8 "S-0001"\t\t# "sw" enhanced port 0 lid 1 lmc 0\nport 3 is up\n', 2,
     "not an ibnetdiscover line"),
    ("SW  1719 10 0x7cfe9003009ce5b0 4x EDR - SW 17 'x' - 'y' )\n", 1, "cannot read the peer"),
])
def test_damaged_lines_name_their_line(tmp_path, text, line, words):
    f = tmp_path / "dump.txt"
    f.write_text(text)
    with pytest.raises(TopologyImportError) as err:
        import_ibnetdiscover(f)
    assert err.value.line == line and words in str(err.value)


def test_node_name_map_names_default_hcas(tmp_path):
    names = tmp_path / "names.map"
    names.write_text('# ibnetdiscover --node-name-map\n0xe09d730300858d88 "a06-p1-dgx-02-c06 '
                     'HCA-6"\n')
    fab = import_ibnetdiscover(topo_fixture(NDR), read_name_map(names))
    assert fab.graph.has_edge("A09-P1-IBLEAF-04-02", "a06-p1-dgx-02-c06/HCA-6")
    assert "H-e09d730300858d88" not in fab.graph
    bad = tmp_path / "bad.map"
    bad.write_text("0x12 noquotes\n")
    with pytest.raises(TopologyImportError, match=r"bad\.map:1"):
        read_name_map(bad)


@pytest.mark.parametrize(("width", "speed", "gbps"), [
    ("4x", "NDR", 400), ("4x", "HDR", 200), ("4x", "EDR", 100), ("1x", "SDR", 2.5),
    ("2x", "NDR", 200), ("4x", "???", None), ("??", "NDR", None)])
def test_cable_rate(width, speed, gbps):
    assert cable_gbps(width, speed) == gbps


def test_bundle_with_a_cable_of_unknown_speed(tmp_path):
    f = tmp_path / "dump.txt"
    f.write_text('Switch\t8 "S-0000000000000001"\t\t# "leafA" enhanced port 0 lid 1 lmc 0\n'
                 '[1]\t"S-0000000000000002"[1]\t\t# "spineA" lid 2 4xNDR\n'
                 '[2]\t"S-0000000000000002"[2]\t\t# "spineA" lid 2 4x???\n'
                 '[3]\t"H-0000000000000003"[1](3)\t\t# "n1 mlx5_0" lid 3 4xNDR\n')
    fab = import_ibnetdiscover(f)
    assert fab.graph.edges["leafA", "spineA"] == {
        "cables": 2, "ports": {"leafA": [1, 2], "spineA": [1, 2]}}
    assert fab.graph.edges["leafA", "n1/mlx5_0"]["gbps"] == 400
    assert any("known and unknown speed" in str(i) for i in fab.issues)
