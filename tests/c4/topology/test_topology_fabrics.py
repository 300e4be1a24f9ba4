"""The fabrics beyond rail-optimized: top-of-rack, three-tier, GPUs sharing NICs; their shape,
their ECMP candidates, and building them by name."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
import typer
from typer.testing import CliRunner

from c4.topology import (
    Topology,
    TopologyError,
    link_id,
    rail_optimized,
    single_switch,
    three_tier,
    top_of_rack,
)
from c4.topology.fabrics import FABRICS, build_fabric
from diagnosis.topology_cli import register


def kinds(t: Topology) -> Counter:
    return Counter(d["kind"] for _, d in t.graph.nodes(data=True))


def link_kinds(t: Topology) -> Counter:
    out: Counter = Counter()
    for lk in t.links():
        u, v = t.endpoints(lk)
        out["-".join(sorted(t.graph.nodes[n].get("tier") or t.kind(n) for n in (u, v)))] += 1
    return out


def check_paths(t: Topology, src: str, dst: str) -> list[list[str]]:
    """The candidates run NIC to NIC over links, through switches only, all equally short, and
    are the shortest paths a graph search finds."""
    links = set(t.links())
    paths = t.paths(src, dst)
    assert paths, (src, dst)
    for p in paths:
        assert p[0] == src and p[-1] == dst
        assert all(link_id(a, b) in links for a, b in itertools.pairwise(p))
        assert all(t.kind(n) == "switch" for n in p[1:-1])
    assert len({len(p) for p in paths}) == 1
    assert sorted(paths) == t._shortest_paths(src, dst, frozenset())
    return paths


def every_nic_reachable(t: Topology) -> None:
    nics = t.nics()
    for nic in nics[1:]:
        assert t.paths(nics[0], nic), nic


def test_top_of_rack_shape_and_paths() -> None:
    t = top_of_rack(10, 4, hosts_per_leaf=4)
    # 3 racks (the last one partial); non-blocking at NIC speed: one spine per leaf downlink
    assert kinds(t) == {"host": 10, "gpu": 40, "nic": 40, "switch": 3 + 16}
    assert t.switches("leaf") == ["leaf00", "leaf01", "leaf02"]
    assert len(t.switches("spine")) == 16 and not t.switches("core")
    assert link_kinds(t) == {"gpu-nic": 40, "leaf-nic": 40, "leaf-spine": 3 * 16}
    assert t.capacity("leaf00~spine03") == 400 and t.index.two_tier
    # every NIC of a host on the host's rack leaf; NICs carry no rail
    assert {sw for n in t.nics("node005") for sw in t.index.nic_up[n]} == {"leaf01"}
    assert t.rail("node005/nic2") is None
    every_nic_reachable(t)
    assert check_paths(t, "node000/nic0", "node001/nic3") == [
        ["node000/nic0", "leaf00", "node001/nic3"]]
    assert check_paths(t, "node000/nic0", "node000/nic1") == [
        ["node000/nic0", "leaf00", "node000/nic1"]]
    far = check_paths(t, "node000/nic0", "node009/nic3")
    assert len(far) == 16 and {p[2] for p in far} == set(t.switches("spine"))


def test_top_of_rack_oversubscribed() -> None:
    t = top_of_rack(8, 2, hosts_per_leaf=4, spines=2, nic_gbps=100)
    assert t.capacity("leaf00~spine01") == 4 * 2 * 100 / 2
    t = top_of_rack(8, 2, hosts_per_leaf=4, spines=2, uplink_gbps=100)
    assert t.capacity("leaf01~spine00") == 100
    assert len(check_paths(t, "node000/nic1", "node007/nic0")) == 2


def test_dual_port_shape_and_paths() -> None:
    t = rail_optimized(8, 4, hosts_per_leaf=2, spines=2, dual_port=True)
    # 4 groups x 4 rails x 2 planes of leaves; two cables per NIC, at half its speed
    assert kinds(t) == {"host": 8, "gpu": 32, "nic": 32, "switch": 32 + 2}
    assert link_kinds(t) == {"gpu-nic": 32, "leaf-nic": 64, "leaf-spine": 32 * 2}
    assert sorted(t.index.nic_up["node003/nic2"]) == ["leaf01r2a", "leaf01r2b"]
    assert t.capacity("leaf01r2b~node003/nic2") == 200
    every_nic_reachable(t)
    assert len(check_paths(t, "node002/nic2", "node003/nic2")) == 2
    assert len(check_paths(t, "node000/nic2", "node007/nic2")) == 2 * 2 * 2


def test_three_tier_shape() -> None:
    t = three_tier(12, 4, rails=2, hosts_per_leaf=2, groups_per_pod=2, spines_per_pod=3,
                   nic_gbps=100)
    # 6 groups of 2 hosts -> 3 pods; 2 rails: 4 leaves per pod; cores: 3 planes x 4 (leaves
    # per pod, non-blocking)
    assert kinds(t) == {"host": 12, "gpu": 48, "nic": 24, "switch": 12 + 9 + 12}
    assert len(t.switches("leaf")) == 12 and len(t.switches("spine")) == 9
    assert len(t.switches("core")) == 12
    assert link_kinds(t) == {"gpu-nic": 48, "leaf-nic": 24, "leaf-spine": 12 * 3,
                             "core-spine": 9 * 4}
    assert t.index.tiered and not t.index.two_tier
    g = t.graph
    assert g.nodes["leaf05r1"]["pod"] == 2 and g.nodes["pod01spine02"]["pod"] == 1
    # spine s of every pod reaches the cores of plane s only
    assert sorted(t.index.up["pod01spine02"]) == ["core08", "core09", "core10", "core11"]
    assert all(g.nodes[c]["plane"] == 2 for c in t.index.up["pod01spine02"])
    # uniform link speed: uplinks 2 hosts x 100 / 3 spines, core links 4 leaves x that / 4
    assert t.capacity("leaf00r0~pod00spine00") == pytest.approx(200 / 3)
    assert t.capacity("core00~pod00spine00") == pytest.approx(200 / 3)
    # GPUs share NICs: 4 GPUs over 2 NICs
    assert t.nic_of_gpu("node003/gpu1") == "node003/nic0"
    assert t.nic_of_gpu("node003/gpu2") == "node003/nic1"
    every_nic_reachable(t)


def test_three_tier_paths_by_tier() -> None:
    t = three_tier(12, 4, rails=2, hosts_per_leaf=2, groups_per_pod=2, spines_per_pod=3)
    # same rail group: the leaf; same pod: one of its spines; other pods: spine, core, spine
    assert check_paths(t, "node000/nic0", "node001/nic0") == [
        ["node000/nic0", "leaf00r0", "node001/nic0"]]
    assert len(check_paths(t, "node000/nic0", "node001/nic1")) == 3
    assert len(check_paths(t, "node000/nic0", "node003/nic0")) == 3
    far = check_paths(t, "node000/nic0", "node011/nic1")
    assert len(far) == 3 * 4
    for p in far:
        tiers = [t.graph.nodes[n].get("tier") for n in p[1:-1]]
        assert tiers == ["leaf", "spine", "core", "spine", "leaf"]
        # the plane: both spines have the index of the core's plane
        assert p[2][-2:] == p[4][-2:] and t.graph.nodes[p[3]]["plane"] == int(p[2][-2:])


def test_nics_per_host_shares_nics_between_gpus() -> None:
    t = rail_optimized(2, 8, rails=2, hosts_per_leaf=2)
    assert len(t.nics()) == 4 and len(t.switches("leaf")) == 2
    assert [t.nic_of_gpu(f"node001/gpu{i}") for i in (0, 3, 4, 7)] == [
        "node001/nic0", "node001/nic0", "node001/nic1", "node001/nic1"]
    t = single_switch(2, 8, nics_per_host=4)
    assert len(t.nics()) == 8 and t.nic_of_gpu("node000/gpu5") == "node000/nic2"
    t = top_of_rack(2, 8, nics_per_host=1, hosts_per_leaf=2)
    assert t.nics("node001") == ["node001/nic0"]
    assert len(t.switches("spine")) == 2


@pytest.mark.parametrize("call", [
    lambda: rail_optimized(0),
    lambda: rail_optimized(4, 2, rails=0),
    lambda: top_of_rack(4, 2, hosts_per_leaf=0),
    lambda: top_of_rack(4, 2, spines=0),
    lambda: three_tier(4, 2, groups_per_pod=0),
    lambda: three_tier(4, 2, cores_per_plane=0),
    lambda: single_switch(2, 0),
])
def test_bad_sizes_raise_topology_errors(call) -> None:
    with pytest.raises(TopologyError):
        call()


@pytest.mark.parametrize("fabric", list(FABRICS))
def test_build_fabric_by_name(fabric) -> None:
    t = build_fabric(fabric, 8, 4, hosts_per_leaf=2)
    assert len(t.gpus()) == 32 and len(t.nics()) == 32
    tiers = {t.graph.nodes[s]["tier"] for s in t.switches()}
    assert tiers == {"rail": {"leaf", "spine"}, "dual_port": {"leaf", "spine"},
                     "tor": {"leaf", "spine"}, "three_tier": {"leaf", "spine", "core"},
                     "single_switch": {"leaf"}}[fabric]
    every_nic_reachable(t)
    t = build_fabric(fabric, 8, 4, nics_per_host=2, hosts_per_leaf=2)
    assert len(t.nics()) == 16


def test_build_fabric_refuses_what_it_cannot_use() -> None:
    with pytest.raises(TopologyError, match=r"unknown fabric 'mesh'.*three_tier"):
        build_fabric("mesh", 4, 2)
    with pytest.raises(TopologyError, match="single_switch has no use for spines, uplink_gbps"):
        build_fabric("single_switch", 4, 2, spines=2, uplink_gbps=100)
    with pytest.raises(TopologyError, match="tor has no use for cores_per_plane"):
        build_fabric("tor", 4, 2, cores_per_plane=2)


@pytest.mark.parametrize(("kind", "extra", "tiers"), [
    ("tor", [], {"leaf": 2, "spine": 64}),
    ("three_tier", ["--groups-per-pod", "1", "--cores-per-plane", "2"],
     {"leaf": 8, "spine": 32, "core": 32}),
    ("dual_port", [], {"leaf": 16, "spine": 16}),
    ("single", [], {"leaf": 1}),
    ("single_switch", ["--nics-per-host", "2"], {"leaf": 1}),
])
def test_cli_gen_every_fabric(tmp_path, kind, extra, tiers) -> None:
    app = typer.Typer()
    register(app)
    out = tmp_path / "t.json"
    res = CliRunner().invoke(app, ["topology", "gen", kind, "--hosts", "32", "--gpus-per-host",
                                   "4", *extra, "-o", str(out)])
    assert res.exit_code == 0, res.output
    t = Topology.load(out)
    assert dict(Counter(t.graph.nodes[s]["tier"] for s in t.switches())) == tiers
    assert json.loads(out.read_text())["graph"]["kind"]
    res = CliRunner().invoke(app, ["topology", "show", str(out)])
    assert res.exit_code == 0 and "structural" in res.output


def test_cli_gen_refuses_options_the_fabric_cannot_use(tmp_path) -> None:
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["topology", "gen", "single", "--spines", "2", "-o",
                                   str(tmp_path / "t.json")])
    assert res.exit_code != 0 and "no use for spines" in res.output
    res = CliRunner().invoke(app, ["topology", "gen", "tor", "--dual-port", "-o",
                                   str(tmp_path / "t.json")])
    assert res.exit_code != 0 and "dual_port" in res.output
