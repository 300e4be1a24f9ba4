"""Slurm topology imports (topology.conf tree/block, topology.yaml, scontrol show topology) on
the recorded samples, hostlist expressions, and the errors of malformed files."""

from __future__ import annotations

import pytest

from c4.topology.importers.common import TopologyImportError, counts
from c4.topology.importers.hostlist import HostlistError, expand
from c4.topology.importers.slurm_conf import import_slurm_conf
from c4.topology.importers.slurm_yaml import import_slurm_yaml
from c4.topology.model import Topology
from tests.support.topology_fixtures import topo_fixture


@pytest.mark.parametrize(("expr", "names"), [
    ("tux[0-3,12]", ["tux0", "tux1", "tux2", "tux3", "tux12"]),
    ("g3-129-[235,237],g3-130-[001,003]", ["g3-129-235", "g3-129-237", "g3-130-001",
                                             "g3-130-003"]),
    ("switch.1.[1-2]", ["switch.1.1", "switch.1.2"]),
    ("node[08-10]", ["node08", "node09", "node10"]),
    ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
    ("leafA1,leafA2", ["leafA1", "leafA2"]),
    ("", []),
])
def test_hostlist(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("expr", ["a[1-", "a]1", "a[3-1]", "a[x]", "a[[1]]"])
def test_bad_hostlist(expr):
    with pytest.raises(HostlistError):
        expand(expr)


def test_tree_small():
    fab = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_small.conf"))
    g = fab.graph
    assert counts(g) == {"hosts": 400, "gpus": 0, "nics": 400, "switches": 23,
                         "tiers": {"core": 1, "leaf": 20, "spine": 2}, "links": 422,
                         "cables": 422}
    assert g.has_edge("leaf100", "peta10000/nic") and g.has_edge("leaf119", "peta10399/nic")
    assert g.has_edge("grp10", "leaf109") and g.has_edge("root", "grp11")
    assert g.nodes["peta10000/nic"]["placeholder"] is True
    assert "gbps" not in g.edges["leaf100", "peta10000/nic"]
    assert Topology(g).index.tiered


def test_tree_3level_file_is_10k_nodes_under_500_leaves():
    """SOURCES.md calls it the 20k-node file: its node names run to peta19999, but it lists
    10,000 nodes (peta10000-19999) under leaf100-599."""
    fab = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_3level_20k_nodes.conf"))
    g = fab.graph
    assert counts(g) == {"hosts": 10000, "gpus": 0, "nics": 10000, "switches": 529,
                         "tiers": {"-": 1, "core": 2, "leaf": 500, "spine": 26},
                         "links": 10528, "cables": 10528}
    assert g.nodes["root"]["level"] == 3 and "tier" not in g.nodes["root"]
    assert g.nodes["im1"]["tier"] == "core" and g.nodes["grp35"]["tier"] == "spine"
    assert g.has_edge("leaf599", "peta19999/nic") and g.has_edge("grp22", "leaf349")
    assert g.has_edge("im1", "grp23") and g.has_edge("root", "im0")
    assert any("above the core tier (root)" in str(i) for i in fab.issues)


def test_tree_disconnected_is_reported():
    fab = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_disconnected.conf"))
    assert counts(fab.graph)["switches"] == 7 and counts(fab.graph)["hosts"] == 40
    assert fab.graph.has_edge("leafC", "node40/nic") and fab.graph.nodes["leafC"]["tier"] == "leaf"
    assert any("3 separate trees" in str(i) and "leafC, spineA, spineB" in str(i)
               for i in fab.issues)


def test_tree_linkspeed_is_not_a_capacity():
    fab = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_linkspeed_guide.conf"))
    g = fab.graph
    assert counts(g)["links"] == 32         # 16 node cables + 4 leaves x 4 spines
    assert g.nodes["s3"]["link_speed"] == "1800" and g.has_edge("s0", "s7")
    assert all("gbps" not in d for _, _, d in g.edges(data=True))


def test_tree_topograph_aliases():
    fab = import_slurm_conf(topo_fixture("slurm_topology_conf_tree_topograph_expected.conf"))
    g = fab.graph
    assert counts(g)["switches"] == 19 and counts(g)["hosts"] == 96
    assert g.nodes["switch.3.1"]["alias"] == "core" and g.nodes["switch.3.1"]["tier"] == "core"
    assert g.nodes["switch.1.10"]["alias"] == "leaf-5-2"
    assert g.has_edge("switch.1.10", "srv5201/nic") and g.has_edge("switch.2.5", "switch.1.10")


@pytest.mark.parametrize(("name", "blocks", "hosts", "sizes"), [
    ("slurm_topology_conf_block_manpage.conf", 4, 128, [30, 120]),
    ("slurm_topology_conf_block_testsuite.conf", 8, 32, [4, 8, 16, 32, 64]),
    ("slurm_topology_conf_block_topograph_expected.conf", 12, 96, [8, 16, 32]),
])
def test_blocks(name, blocks, hosts, sizes):
    fab = import_slurm_conf(topo_fixture(name))
    g = fab.graph
    c = counts(g)
    assert (c["switches"], c["hosts"], c["links"]) == (blocks, hosts, hosts)
    assert g.graph["block_sizes"] == sizes
    assert all(d.get("block") and d["tier"] == "leaf" for _, d in g.nodes(data=True)
               if d["kind"] == "switch")
    assert any("joined to nothing" in str(i) for i in fab.issues)


def test_block_links_and_alias():
    g = import_slurm_conf(topo_fixture("slurm_topology_conf_block_topograph_expected.conf")).graph
    assert g.has_edge("rack52", "srv5208/nic") and g.nodes["rack52"]["alias"] == "nvl-5-2"
    g = import_slurm_conf(topo_fixture("slurm_topology_conf_block_testsuite.conf")).graph
    assert g.has_edge("b1", "node01/nic") and g.has_edge("b8", "node32/nic")


def test_scontrol_tree_levels_and_repeated_nodes():
    fab = import_slurm_conf(topo_fixture("scontrol_show_topo_tree_gcm_sample.txt"))
    g = fab.graph
    assert counts(g) == {"hosts": 5, "gpus": 0, "nics": 5, "switches": 4,
                         "tiers": {"leaf": 3, "spine": 1}, "links": 6, "cables": 6}
    # h100-008-154 is listed on its leaf and again on the spine above: cabled to the leaf
    assert g.has_edge("h100", "h100-008-154/nic")
    assert not g.has_edge("spine-use2-az3-0", "h100-008-154/nic")
    assert g.has_edge("spine-use2-az3-0", "h100")
    text = [str(i) for i in fab.issues]
    assert any("data-transfer" in t and "no nodes" in t for t in text)
    assert any("3 separate trees" in t for t in text)


def test_scontrol_block():
    g = import_slurm_conf(topo_fixture("scontrol_show_topo_block_gcm_sample.txt")).graph
    assert counts(g)["hosts"] == 10 and counts(g)["switches"] == 3
    assert g.has_edge("block_DH1-067-US-EAST-04B", "g3-130-003/nic")


def test_yaml_takes_the_cluster_default_and_reports_the_rest():
    path = topo_fixture("slurm_topology_yaml_multi_manpage.yaml")
    fab = import_slurm_yaml(path)
    g = fab.graph
    assert g.graph["slurm_topology"] == "topo1"
    assert counts(g) == {"hosts": 4, "gpus": 0, "nics": 4, "switches": 3,
                         "tiers": {"leaf": 2, "spine": 1}, "links": 6, "cables": 6}
    assert g.has_edge("sw_root", "s1") and g.has_edge("s2", "node04/nic")
    assert any("skipped topo2 (block), topo3 (flat)" in str(i) for i in fab.issues)
    blocks = import_slurm_yaml(path, "topo2").graph
    assert blocks.graph["block_sizes"] == [4, 16] and blocks.has_edge("b4", "node16/nic")
    ring = import_slurm_yaml(path, "topo4")
    assert ring.graph.nodes["node09"] == {"kind": "host", "ring": "ring1", "ring_position": 0}
    with pytest.raises(TopologyImportError, match="flat: it names no switches"):
        import_slurm_yaml(path, "topo3")
    with pytest.raises(TopologyImportError, match="no topology named 'nope'"):
        import_slurm_yaml(path, "nope")


def test_yaml_torus_imports_hosts_without_links():
    fab = import_slurm_yaml(topo_fixture("slurm_topology_yaml_torus3d_regions_guide.yaml"))
    g = fab.graph
    assert counts(g)["hosts"] == 32 and counts(g)["links"] == 0
    assert g.nodes["rack2-node16"]["torus_region"] == [0, 2, 0, 4, 2, 2]
    assert any(i.level == "warning" and "3D torus" in str(i) for i in fab.issues)


@pytest.mark.parametrize(("text", "line", "words"), [
    ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", 1, "cycle"),
    ("SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n", 2, "mixes SwitchName"),
    ("SwitchName=a Nodes=n[1-\n", 1, "bad hostlist"),
    ("NodeName=a\n", 1, "does not start a topology line"),
    ("SwitchName=a Nodes\n", 1, "is not Key=Value"),
    ("BlockName=b Nodes=n1\nBlockSizes=4,x\n", 2, "integers"),
])
def test_conf_errors_name_their_line(tmp_path, text, line, words):
    f = tmp_path / "topology.conf"
    f.write_text(text)
    with pytest.raises(TopologyImportError) as err:
        import_slurm_conf(f)
    assert err.value.line == line and words in str(err.value)


def test_conf_warnings(tmp_path):
    f = tmp_path / "topology.conf"
    f.write_text("SwitchName=top Switches=l1,l2 Color=red\nSwitchName=l1 Nodes=n[1-2]\n"
                 "SwitchName=l3 Nodes=n2\n")
    fab = import_slurm_conf(f)
    text = [str(i) for i in fab.issues]
    assert any(":1:" in t and "unknown key color=" in t for t in text)
    assert any("'l2', which is never defined" in t for t in text)
    assert any("node 'n2' is listed under 'l1' and 'l3'" in t for t in text)
    assert fab.graph.has_edge("l1", "n2/nic") and not fab.graph.has_edge("l3", "n2/nic")
