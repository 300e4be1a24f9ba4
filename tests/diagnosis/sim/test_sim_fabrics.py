"""The simulator on every fabric: network faults land on components that carry the job's
traffic, the ground truth's accept rule follows the cabling (dual-port NICs), GPUs may share
NICs, and the default rail fabric is what it always was."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import pytest
from simtrace_helpers import Trace, run

from c4.topology import Topology, link_id
from c4.topology.fabrics import FABRICS
from diagnosis.sim import FaultSpec, SimConfig, SimError, Simulation, simulate

ONSET = 4
# 64 GPUs = 8 hosts, two replicas of 4 stages; 2 hosts per leaf so that traffic crosses every
# tier (on three_tier the replicas sit in different pods, so the rings cross the core)
BASE = {"gpus": 64, "iterations": 8, "microbatches": 2, "seed": 3, "hosts_per_leaf": 2,
        "gc_rate": 0.0, "checkpoint_every": 0, "congestion_rate": 0.0}
NETWORK = ["slow_nic", "dead_nic", "slow_link:cable", "dead_link:cable", "slow_link:uplink",
           "dead_link:uplink", "slow_switch:leaf", "slow_switch:spine", "slow_switch:core",
           "dead_switch:leaf", "dead_switch:spine"]
NO_TIER = {"rail": {"core"}, "dual_port": {"core"}, "tor": {"core"}, "three_tier": set(),
           "single_switch": {"uplink", "spine", "core"}}


def sim(tmp_path, fabric: str, *faults: str, **kw) -> Trace:
    return run(tmp_path, **{**BASE, "fabric": fabric, **kw,
                            "faults": tuple(FaultSpec.parse(f) for f in faults)})


def path_links(path: list[str]) -> set[str]:
    return {link_id(a, b) for a, b in itertools.pairwise(path)}


def crossing(tr: Trace, component: str, after_ns: int) -> set[tuple[int, int]]:
    """Connections (src, dst) whose transfers since ``after_ns`` cross a node or link."""
    out = set()
    for c in tr.conns:
        if c["t_start_ns"] >= after_ns and (component in c["path"]
                                            or component in path_links(c["path"])):
            out.add((c["src"], c["dst"]))
    return out


CASES = [(fabric, f) for fabric in FABRICS for f in NETWORK
         if f.partition(":")[2] not in NO_TIER[fabric]]


@pytest.mark.parametrize(("fabric", "fault"), CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_network_fault_names_a_component_carrying_the_jobs_traffic(tmp_path, fabric, fault):
    tr = sim(tmp_path, fabric, f"{fault}@{ONSET},slow=3" if fault.startswith("slow")
             else f"{fault}@{ONSET}")
    topo = Topology.load(tr.dir / "topology.json")
    f = tr.truth["faults"][0]
    comp = f["component"]
    kind, _, target = fault.partition(":")
    if comp["type"] == "link":
        ends = topo.endpoints(comp["id"])
        kinds = {topo.kind(e) for e in ends}
        assert ("nic" in kinds) == (target == "cable")
        assert kinds <= {"nic", "switch"}
    else:
        assert topo.kind(comp["id"]) == comp["type"]
        if target:
            assert topo.graph.nodes[comp["id"]]["tier"] == target
    assert crossing(tr, comp["id"], 0), "the faulty component carries none of the job's traffic"
    assert comp in f["accept"]
    for a in f["accept"] + f["equivalent"]:
        if a["type"] == "link":
            topo.endpoints(a["id"])
        elif a["type"] != "rank":
            assert topo.kind(a["id"]) == a["type"]
    assert f["observable"] and f["ranks"]
    if kind.startswith("dead_"):
        stuck = [c for c in tr.conns if c.get("t_end_ns") is None]
        assert stuck and tr.truth["stalled"]
        assert all(comp["id"] in c["path"] or comp["id"] in path_links(c["path"])
                   for c in stuck)
        assert f["expected_report"] == "comm_hang"
    else:
        assert f["expected_report"] == "comm_slow"


def test_dual_port_accept_rule(tmp_path):
    """A dual-port NIC has two cables: neither stands for the NIC, nor the NIC for one of them;
    the simulator lists the other as equivalent only when it carries exactly the same
    connections."""
    seen_equiv = {"nic": False, "link": False}
    for seed in (0, 9, 10):      # 9 and 10: ECMP put a NIC's every connection on one port
        for fault in ("slow_nic", "slow_link:cable"):
            tr = sim(tmp_path / f"{seed}{fault}", "dual_port", f"{fault}@{ONSET},slow=3",
                     seed=seed)
            topo = Topology.load(tr.dir / "topology.json")
            f = tr.truth["faults"][0]
            assert f["accept"] == [f["component"]]
            comp = f["component"]["id"]
            nic = comp if fault == "slow_nic" else next(
                e for e in comp.split("~") if topo.kind(e) == "nic")
            cables = [lk for lk in topo.links_of(nic) if "leaf" in lk]
            assert len(cables) == 2
            onset = tr.truth["iteration_start_ns"][ONSET]
            mine = crossing(tr, comp, onset)
            equiv = {(e["type"], e["id"]) for e in f["equivalent"]}
            others = [("link", c) for c in cables] if fault == "slow_nic" else [("nic", nic)]
            for other in others:
                if other[1] == comp:
                    continue
                same = crossing(tr, other[1], onset) == mine
                assert (other in equiv) == same, (seed, fault, other)
                seen_equiv[other[0]] |= same
    # over these seeds both happen: a NIC whose traffic used one port only, and a cable that
    # carried everything its NIC carried
    assert seen_equiv["link"] and seen_equiv["nic"]


def test_single_port_nic_and_its_cable_stand_for_each_other(tmp_path):
    for fabric in ("rail", "tor", "three_tier", "single_switch"):
        tr = sim(tmp_path / fabric, fabric, f"slow_nic@{ONSET}")
        f = tr.truth["faults"][0]
        assert [a["type"] for a in f["accept"]] == ["nic", "link"]
        assert f["component"]["id"] in f["accept"][1]["id"].split("~")


def test_tor_rings_cross_spines_and_rack_neighbours_turn_at_their_leaf(tmp_path):
    tr = sim(tmp_path, "tor", hosts_per_leaf=2, iterations=3)
    topo = Topology.load(tr.dir / "topology.json")
    host = {r: rec["host"] for r, rec in tr.ranks.items()}
    for c in tr.conns:
        p = c["path"]
        leaves = {topo.index.nic_up[p[0]][0], topo.index.nic_up[p[-1]][0]}
        if len(leaves) == 1:      # same rack: in at the leaf, out at the same leaf
            assert p == [p[0], leaves.pop(), p[-1]]
        else:
            assert [topo.graph.nodes[n]["tier"] for n in p[1:-1]] == ["leaf", "spine", "leaf"]
        assert host[c["src"]] != host[c["dst"]]
    dp = [c for c in tr.conns if c["pg"].startswith("dp")]
    pp = [c for c in tr.conns if c["pg"].startswith("pp")]
    assert dp and all(len(c["path"]) == 5 for c in dp)     # replicas in different racks
    assert any(len(c["path"]) == 3 for c in pp)            # stages 0-1 and 2-3 share a rack


def test_three_tier_rings_cross_the_core(tmp_path):
    tr = sim(tmp_path, "three_tier", iterations=3)
    topo = Topology.load(tr.dir / "topology.json")
    tiers = defaultdict(set)
    for c in tr.conns:
        tiers[c["pg"][:2]].add(tuple(topo.graph.nodes[n]["tier"] for n in c["path"][1:-1]))
    assert tiers["dp"] == {("leaf", "spine", "core", "spine", "leaf")}
    # pipeline stages: the same pod's rail leaf, or across pods through the core
    assert tiers["pp"] == {("leaf",), ("leaf", "spine", "core", "spine", "leaf")}


def test_gpus_sharing_a_nic_share_its_cable(tmp_path):
    tr = sim(tmp_path, "rail", f"slow_nic:node004/nic1@{ONSET},slow=3", nics_per_host=2)
    nics = {rec["nic"] for rec in tr.ranks.values()}
    assert len(nics) == 16
    assert tr.ranks[32 + 5]["nic"] == "node004/nic1" == tr.ranks[32 + 7]["nic"]
    # the dp rings of GPUs 4-7 of host 4 all go through its nic1
    f = tr.truth["faults"][0]
    assert {32 + t for t in range(4, 8)} <= set(f["ranks"])
    topo = Topology.load(tr.dir / "topology.json")
    assert len(topo.switches("leaf")) == 4 * 2


def test_fabric_options_are_checked():
    with pytest.raises(SimError, match="--fabric 'mesh'"):
        SimConfig(fabric="mesh")
    with pytest.raises(SimError, match="--nics-per-host 9"):
        SimConfig(nics_per_host=9)
    with pytest.raises(SimError, match="single_switch fabric has no uplinks"):
        SimConfig(fabric="single_switch", uplink_gbps=100.0)
    # rings on one rail matter only where there are rails
    with pytest.raises(SimError, match="one rail of the rail fabric"):
        SimConfig(gpus=64, tp=2, pp=2)
    for fabric in ("tor", "single_switch"):
        assert SimConfig(gpus=64, tp=2, pp=2, fabric=fabric).dp == 16
    cfg = SimConfig(**{**BASE, "fabric": "single_switch",
                       "faults": (FaultSpec.parse("slow_switch:spine@2"),)})
    with pytest.raises(SimError, match="no spine switch on the single_switch fabric; target "
                                       "leaf, auto"):
        Simulation(cfg)


def test_tor_without_rail_alignment_runs(tmp_path):
    tr = sim(tmp_path, "tor", f"slow_link:uplink@{ONSET},slow=3", tp=2, pp=2, iterations=6)
    assert tr.truth["layout"]["dp"] == 16 and tr.truth["faults"][0]["observable"]


def test_default_fabric_is_the_rail_fabric_byte_for_byte(tmp_path):
    kw = {"gpus": 128, "iterations": 3, "microbatches": 1, "seed": 9, "hosts_per_leaf": 4,
          "faults": (FaultSpec.parse("slow_link:uplink@1,slow=2"),)}
    a = simulate(SimConfig(**kw), tmp_path / "a")
    b = simulate(SimConfig(fabric="rail", nics_per_host=8, **kw), tmp_path / "b")
    for x, y in ((a.trace, b.trace), (a.topology, b.topology), (a.truth, b.truth)):
        assert x.read_bytes() == y.read_bytes()
    assert json.loads(a.topology.read_text())["graph"]["kind"] == "rail_optimized"


def test_cli_fabric_and_nics_per_host(tmp_path):
    from typer.testing import CliRunner

    from c4.cli import build_app

    app, runner = build_app(), CliRunner()
    res = runner.invoke(app, ["sim", "--gpus", "64", "--iterations", "3", "--microbatches", "1",
                              "--fabric", "tor", "--nics-per-host", "4", "--hosts-per-leaf",
                              "2", "--fault", "slow_switch:spine@1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    topo = Topology.load(tmp_path / "topology.json")
    assert topo.graph.graph["kind"] == "top_of_rack" and len(topo.nics("node000")) == 4
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert topo.graph.nodes[truth["faults"][0]["component"]["id"]]["tier"] == "spine"
    res = runner.invoke(app, ["sim", "--out", str(tmp_path), "--fabric", "torus"])
    assert res.exit_code != 0 and "torus" in res.output
