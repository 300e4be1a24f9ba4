"""c4 topology check: which links and switches transfers tell apart, what they cannot reach,
and what the hosts' insides leave unknown; on built fabrics with known answers and on the
imported NDR fat-tree."""

from __future__ import annotations

import json

import networkx as nx
import pytest
import typer
from typer.testing import CliRunner

from c4.topology import Topology, single_switch, top_of_rack
from c4.topology.check import check_topology
from c4.topology.importers.ibnetdiscover import import_ibnetdiscover
from c4.topology.importers.slurm_conf import import_slurm_conf
from diagnosis.topology_cli import register
from tests.support.topology_fixtures import topo_fixture


def codes(result) -> dict[str, object]:
    return {f.code: f for f in result.findings}


def test_two_leaves_cannot_tell_a_spine_from_its_links():
    """With two leaves, every transfer through spine s crosses both of its links: the three
    are one to c4. A third leaf gives each link transfers of its own."""
    two = check_topology(top_of_rack(8, 1, hosts_per_leaf=4, spines=2))
    groups = codes(two)["indistinguishable"].items
    assert groups == [["leaf00~spine00", "leaf01~spine00", "spine00"],
                      ["leaf00~spine01", "leaf01~spine01", "spine01"]]
    assert two.localizable["links_distinct"] == 0 and two.localizable["switches_distinct"] == 2
    three = check_topology(top_of_rack(12, 1, hosts_per_leaf=4, spines=2))
    assert "indistinguishable" not in codes(three)
    assert three.localizable["links_distinct"] == 6 == three.localizable["switch_links"]


def test_links_off_every_path_are_invisible():
    topo = top_of_rack(12, 1, hosts_per_leaf=4, spines=2)
    g = topo.graph.copy()
    g.add_edge("spine00", "spine01", gbps=400.0)      # no shortest path uses it
    g.add_node("spare", kind="switch", tier="spine")
    g.add_edge("leaf00", "spare", gbps=400.0)         # a dead end
    assert set(g) == set(topo.graph) | {"spare"}
    found = codes(check_topology(Topology(g)))
    assert found["link_unused"].items == ["leaf00~spare", "spine00~spine01"]
    assert found["switch_unused"].items == ["spare"]


def test_hosts_without_pairing_and_without_nics():
    g = nx.Graph()
    g.add_node("sw", kind="switch", tier="leaf")
    for h in ("h1", "h2"):
        g.add_node(h, kind="host")
        for i in range(2):
            g.add_node(f"{h}/gpu{i}", kind="gpu", host=h)
            g.add_node(f"{h}/nic{i}", kind="nic", host=h)
            g.add_edges_from([(h, f"{h}/gpu{i}"), (h, f"{h}/nic{i}"), (f"{h}/nic{i}", "sw")])
    g.add_edge("h1/gpu0", "h1/nic0")
    g.add_edge("h1/gpu1", "h1/nic1")
    g.add_node("h3", kind="host")
    found = codes(check_topology(Topology(g)))
    assert found["host_no_pairing"].items == ["h2"]
    assert found["host_no_nic"].items == ["h3"]
    assert found["no_capacity"].severity == "gap"
    assert "host_no_pairing" not in codes(check_topology(single_switch(4, 8)))


def test_ndr_fat_tree():
    topo = Topology(import_ibnetdiscover(
        topo_fixture("ibnetdiscover_ndr_fattree_topograph_example.out")).graph)
    res = check_topology(topo)
    found = codes(res)
    assert res.localizable == {"switch_links": 269, "switches": 40, "leaves": 31,
                               "analysed": True, "links_distinct": 269,
                               "switches_distinct": 40, "paths": res.localizable["paths"]}
    assert len(found["bundle"].items) == 263
    assert {"link": "A09-P1-IBLEAF-04-04~A10-P1-IBSPINE-02", "cables": 2} in found["bundle"].items
    assert len(found["thin_bundle"].items) == 6
    assert "A09-P1-IBLEAF-01-01~A10-P1-IBSPINE-04" in found["thin_bundle"].items
    assert len(found["host_no_gpu"].items) == 191 and "disconnected" not in found
    assert len(found["nic_cable"].items) == 542


def test_disconnected_trees():
    topo = Topology(import_slurm_conf(
        topo_fixture("slurm_topology_conf_tree_disconnected.conf")).graph)
    found = codes(check_topology(topo))
    assert found["disconnected"].items == ["16 host(s), 3 switch(es) (leafA1, leafA2, … (1 more))",
                                           "16 host(s), 3 switch(es) (leafB1, leafB2, … (1 more))",
                                           "8 host(s), 1 switch(es) (leafC)"]
    assert "unrouted" not in found
    assert found["host_nic_unknown"].severity == "gap"


def test_max_leaves_skips_the_path_comparison():
    res = check_topology(top_of_rack(12, 1, hosts_per_leaf=4, spines=2), max_leaves=2)
    assert res.localizable["analysed"] is False and "3 leaves" in res.localizable["reason"]


@pytest.fixture()
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def test_cli_check_text_and_json(app, tmp_path):
    path = tmp_path / "t.json"
    top_of_rack(8, 1, hosts_per_leaf=4, spines=2).save(path)
    res = CliRunner().invoke(app, ["topology", "check", str(path)])
    assert res.exit_code == 0, res.output
    assert "c4 can single out 0 of 4 switch-to-switch links" in res.output
    assert "leaf00~spine00 = leaf01~spine00 = spine00" in res.output
    res = CliRunner().invoke(app, ["topology", "check", str(path), "--format", "json"])
    doc = json.loads(res.output)
    assert doc["counts"]["switches"] == 4
    assert doc["findings"][0]["code"] == "indistinguishable"
    res = CliRunner().invoke(app, ["topology", "check", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "cannot read topology file" in res.output
