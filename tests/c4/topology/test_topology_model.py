"""Topology builders, node-link round trip, malformed files and paths known by hand."""

from __future__ import annotations

import json

import networkx as nx
import pytest
import typer
from typer.testing import CliRunner

from c4.errors import FormatError
from c4.topology import Topology, TopologyError, link_id, rail_optimized, single_switch
from diagnosis.topology_cli import register


def test_link_id_sorts_endpoints() -> None:
    assert link_id("node012/nic3", "leaf07") == "leaf07~node012/nic3"
    assert link_id("leaf07", "node012/nic3") == "leaf07~node012/nic3"


def test_rail_optimized_counts_and_ids() -> None:
    t = rail_optimized(32, 8, hosts_per_leaf=16)
    assert len(t.hosts()) == 32 and len(t.gpus()) == 256 and len(t.nics()) == 256
    assert len(t.switches("leaf")) == 2 * 8 and len(t.switches("spine")) == 16
    assert t.hosts()[:2] == ["node000", "node001"]
    assert t.gpus("node012")[3] == "node012/gpu3"
    assert t.nic_of_gpu("node012/gpu3") == "node012/nic3"
    assert t.rail("node012/nic3") == 3 and t.host_of("node012/nic3") == "node012"
    assert t.kind("leaf01r3") == "switch"
    # gpu-nic 256, nic-leaf 256, leaf-spine 16*16; host membership edges are not links
    assert len(t.links()) == 256 + 256 + 16 * 16
    assert "leaf01r3~node017/nic3" in set(t.links())
    assert t.capacity("leaf01r3~spine05") == 400
    assert t.capacity(link_id("node017/nic3", "leaf01r3")) == 400


def test_rail_optimized_dual_port_and_oversubscription() -> None:
    t = rail_optimized(4, 2, hosts_per_leaf=4, spines=2, nic_gbps=400, dual_port=True)
    assert sorted(t.switches("leaf")) == ["leaf00r0a", "leaf00r0b", "leaf00r1a", "leaf00r1b"]
    assert t.capacity("leaf00r0a~node000/nic0") == 200
    assert t.capacity("leaf00r0a~spine00") == 4 * 200 / 2
    # Two ports on two leaves: two one-switch paths between NICs of the same rail.
    assert t.paths("node000/nic0", "node001/nic0") == [
        ["node000/nic0", "leaf00r0a", "node001/nic0"],
        ["node000/nic0", "leaf00r0b", "node001/nic0"]]
    # Across rails: 2 source leaves x 2 spines x 2 destination leaves.
    assert len(t.paths("node000/nic0", "node001/nic1")) == 8


def test_single_switch() -> None:
    t = single_switch(3, 2, nic_gbps=100)
    assert t.nics("node001") == ["node001/nic0", "node001/nic1"]
    assert t.switches() == ["switch0"]
    assert t.paths("node000/nic0", "node002/nic1") == [["node000/nic0", "switch0",
                                                         "node002/nic1"]]


def test_paths_known_by_hand() -> None:
    t = rail_optimized(4, 1, hosts_per_leaf=2, spines=2)
    assert t.paths("node000/nic0", "node001/nic0") == [["node000/nic0", "leaf00r0",
                                                         "node001/nic0"]]
    assert t.paths("node000/nic0", "node003/nic0") == [
        ["node000/nic0", "leaf00r0", "spine00", "leaf01r0", "node003/nic0"],
        ["node000/nic0", "leaf00r0", "spine01", "leaf01r0", "node003/nic0"]]
    assert t.path_links(t.paths("node000/nic0", "node003/nic0")[1]) == [
        "leaf00r0~node000/nic0", "leaf00r0~spine01", "leaf01r0~spine01", "leaf01r0~node003/nic0"]
    down = {"leaf00r0~spine00"}
    assert t.paths_avoiding("node000/nic0", "node003/nic0", down) == [
        ["node000/nic0", "leaf00r0", "spine01", "leaf01r0", "node003/nic0"]]
    assert t.paths_avoiding("node000/nic0", "node003/nic0", {"leaf00r0~node000/nic0"}) == []


def test_structural_paths_match_graph_search() -> None:
    t = rail_optimized(6, 2, hosts_per_leaf=2, spines=3, dual_port=True)
    assert t.index.two_tier
    for src, dst in [("node000/nic0", "node005/nic0"), ("node000/nic1", "node004/nic0"),
                     ("node002/nic1", "node003/nic1")]:
        assert sorted(t.paths(src, dst)) == t._shortest_paths(src, dst, frozenset())


def test_arbitrary_graph_falls_back_to_graph_search() -> None:
    g = nx.Graph()
    g.add_node("h0", kind="host")
    g.add_node("h1", kind="host")
    for i in (0, 1):
        g.add_node(f"h{i}/nic0", kind="nic", host=f"h{i}")
        g.add_edge(f"h{i}", f"h{i}/nic0")
    for s in ("a", "b", "c", "d"):
        g.add_node(s, kind="switch")
    g.add_edges_from([("h0/nic0", "a"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"),
                      ("d", "h1/nic0")], gbps=100)
    t = Topology(g)
    assert not t.index.two_tier
    assert t.paths("h0/nic0", "h1/nic0") == [["h0/nic0", "a", "b", "d", "h1/nic0"],
                                             ["h0/nic0", "a", "c", "d", "h1/nic0"]]


def test_save_load_round_trip(tmp_path) -> None:
    t = rail_optimized(4, 2, hosts_per_leaf=2, spines=2)
    path = tmp_path / "topo.json"
    t.save(path)
    back = Topology.load(path)
    assert nx.utils.graphs_equal(t.graph, back.graph)
    assert back.paths("node000/nic1", "node003/nic1") == t.paths("node000/nic1", "node003/nic1")
    assert "links" in json.loads(path.read_text())


def test_default_placement() -> None:
    t = rail_optimized(2, 4, hosts_per_leaf=2)
    p = t.default_placement(6)
    assert p[0] == ("node000", "node000/gpu0", "node000/nic0")
    assert p[5] == ("node001", "node001/gpu1", "node001/nic1")
    with pytest.raises(TopologyError, match="does not fit"):
        t.default_placement(9)


def _small_json() -> dict:
    return {"directed": False, "multigraph": False, "graph": {},
            "nodes": [{"id": "h0", "kind": "host"}, {"id": "h0/nic0", "kind": "nic", "host": "h0"},
                      {"id": "sw", "kind": "switch", "tier": "leaf"}],
            "links": [{"source": "h0", "target": "h0/nic0"},
                      {"source": "h0/nic0", "target": "sw", "gbps": 100}]}


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (lambda o: o["nodes"][2].pop("kind"), "nodes[2].kind", "'sw'"),
    (lambda o: o["nodes"][1].update(kind="router"), "nodes[1].kind", "router"),
    (lambda o: o["links"][1].update(target="nowhere"), "links[1].target", "nowhere"),
    (lambda o: o["links"][1].update(gbps=-5), "links[1].gbps", "h0/nic0~sw"),
    (lambda o: o["links"][1].update(gbps="fast"), "links[1].gbps", "fast"),
    (lambda o: o["nodes"][1].update(host="h9"), "nodes[1].host", "h9"),
    (lambda o: o["nodes"][1].update(rail="x"), "nodes[1].rail", "rail"),
    (lambda o: o.pop("nodes"), "nodes", "nodes"),
])
def test_malformed_files_name_the_field(tmp_path, mutate, field, words) -> None:
    obj = _small_json()
    mutate(obj)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(FormatError) as info:
        Topology.load(path)
    assert info.value.field == field
    assert field in str(info.value) and words in str(info.value) and "bad.json" in str(info.value)


def test_not_json_names_the_line(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": [\n  {"id": "a",}\n]}')
    with pytest.raises(FormatError, match=r"bad\.json:2"):
        Topology.load(path)


def test_unknown_link_and_node() -> None:
    t = single_switch(1)
    with pytest.raises(TopologyError, match="not in the topology"):
        t.capacity("a~b")
    with pytest.raises(TopologyError, match="not in the topology"):
        t.kind("nope")


def test_cli_gen_and_show(tmp_path) -> None:
    app = typer.Typer()
    register(app)
    out = tmp_path / "t.json"
    runner = CliRunner()
    res = runner.invoke(app, ["topology", "gen", "rail", "--hosts", "32", "--gpus-per-host", "4",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(Topology.load(out).switches("leaf")) == 8
    res = runner.invoke(app, ["topology", "show", str(out)])
    assert res.exit_code == 0, res.output
    assert "spine" in res.output and "128" in res.output
    out.write_text("{}")
    res = runner.invoke(app, ["topology", "show", str(out)])
    assert res.exit_code == 2
