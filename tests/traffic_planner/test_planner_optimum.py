"""Small fabrics whose optimum is known by hand; re-planning after a failure; the bound."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import numpy as np
import pytest

from c4.topology import Topology, link_id, rail_optimized
from traffic_planner.bound import _lp, lower_bound
from traffic_planner.coloring import _bipartite_edge_colouring, colour
from traffic_planner.errors import NoPathError, UnknownLinkError
from traffic_planner.flows import Flow
from traffic_planner.hashing import EcmpModel
from traffic_planner.plan import plan_flows
from traffic_planner.problem import build_problem
from traffic_planner.solver import solve


def two_leaves(hosts_per_leaf: int, uplinks: dict[str, float], nic_gbps: float = 1000) -> Topology:
    """Leaves L0 and L1 (hosts a0.. and b0..), spines named by ``uplinks`` (gbps each way)."""
    g = nx.Graph()
    for side, leaf in (("a", "L0"), ("b", "L1")):
        g.add_node(leaf, kind="switch", tier="leaf")
        for i in range(hosts_per_leaf):
            h = f"{side}{i}"
            g.add_node(h, kind="host")
            g.add_node(f"{h}/nic0", kind="nic", host=h, rail=0)
            g.add_edge(h, f"{h}/nic0")
            g.add_edge(f"{h}/nic0", leaf, gbps=nic_gbps)
    for sp, gbps in uplinks.items():
        g.add_node(sp, kind="switch", tier="spine")
        g.add_edge("L0", sp, gbps=gbps)
        g.add_edge("L1", sp, gbps=gbps)
    return Topology(g)


def cross(demands: list[float]) -> list[Flow]:
    return [Flow(f"j:{i}", f"a{i}/nic0", f"b{i}/nic0", d) for i, d in enumerate(demands)]


def test_two_flows_take_different_spines() -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=2, nic_gbps=100)
    flows = [Flow("r:0>2", "node000/nic0", "node002/nic0", 100),
             Flow("r:1>3", "node001/nic0", "node003/nic0", 100)]
    res = plan_flows(topo, flows, ecmp_seeds=16)
    assert res.max_link_load == pytest.approx(1.0)
    assert res.bound.value == pytest.approx(1.0)
    assert {res.path(0)[2], res.path(1)[2]} == {"spine00", "spine01"}
    # Some hash draws put both flows on one spine: ECMP is worse on average.
    assert max(res.ecmp.max_loads) == pytest.approx(2.0)
    assert res.ecmp.mean > 1.0


def test_partition_optimum() -> None:
    # 60+30 and 50+40 on two 100 G uplinks: 0.9, which is also the fractional optimum.
    res = plan_flows(two_leaves(4, {"S0": 100, "S1": 100}), cross([60, 50, 40, 30]))
    assert res.max_link_load == pytest.approx(0.9)
    assert res.bound.value == pytest.approx(0.9)


def test_repair_beats_greedy() -> None:
    # Greedy (largest first) gives 3+2+2 = 7 on one uplink; the optimum is 3+3 | 2+2+2 = 6.
    topo = two_leaves(5, {"S0": 6, "S1": 6})
    res = plan_flows(topo, cross([3, 3, 2, 2, 2]))
    assert res.max_link_load == pytest.approx(1.0)
    assert res.bound.value == pytest.approx(1.0)
    spine = [res.path(f)[2] for f in range(5)]
    assert spine[0] == spine[1] and {spine[2], spine[3], spine[4]} == {"S0", "S1"} - {spine[0]}


def test_oversubscribed_fabric() -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=1, nic_gbps=100, uplink_gbps=100)
    flows = [Flow("a", "node000/nic0", "node002/nic0", 100),
             Flow("b", "node001/nic0", "node003/nic0", 100)]
    res = plan_flows(topo, flows)
    assert res.max_link_load == pytest.approx(2.0) == res.bound.value


def test_lp_bound_when_even_split_is_not_optimal() -> None:
    # 200 G across uplinks of 100 and 300: best fractional split loads both at 0.5.
    problem = build_problem(two_leaves(2, {"S0": 100, "S1": 300}), cross([100, 100]))
    b = lower_bound(problem)
    assert b.value == pytest.approx(0.5) == b.cut      # the cut is met by an uneven split
    # The linear program itself, on the same numbers: 2 units over arcs of capacity 1 and 3.
    assert _lp([((0,), (1,))], [2.0], [0, 1], np.zeros(2), np.array([1.0, 3.0])) == \
        pytest.approx(0.5)
    sol = solve(problem, target=b.unsplittable)
    assert sol.max_load == pytest.approx(2 / 3)    # both on S1 (200/300) beats one on S0 (1.0)


def test_dual_port_nics_balance_ports() -> None:
    topo = rail_optimized(2, 1, hosts_per_leaf=2, spines=1, nic_gbps=400, dual_port=True)
    flows = [Flow(f"x:{i}", "node000/nic0", "node001/nic0", 200) for i in range(2)]
    res = plan_flows(topo, flows)
    assert res.max_link_load == pytest.approx(1.0)
    assert {res.path(0)[1], res.path(1)[1]} == {"leaf00r0a", "leaf00r0b"}


def test_replan_after_failure_moves_only_displaced_flows() -> None:
    topo = rail_optimized(8, 1, hosts_per_leaf=4, spines=4, nic_gbps=100, uplink_gbps=100)
    flows = [Flow(f"r:{i}", f"node00{i}/nic0", f"node00{i + 4}/nic0", 100) for i in range(3)]
    first = plan_flows(topo, flows)
    assert first.max_link_load == pytest.approx(1.0)
    spine = first.path(0)[2]
    dead = link_id("leaf00r0", spine)
    previous = {f.id: first.path(i) for i, f in enumerate(flows)}
    again = plan_flows(topo, flows, [dead], previous=previous)
    assert again.solution.moved == 1
    assert again.max_link_load == pytest.approx(1.0)
    assert dead not in topo.path_links(again.path(0))
    assert again.path(1) == first.path(1) and again.path(2) == first.path(2)


def test_replan_when_capacity_is_short_keeps_the_optimum() -> None:
    # Four flows fill four uplinks; one uplink fails: two flows must share one (load 2).
    topo = rail_optimized(8, 1, hosts_per_leaf=4, spines=4, nic_gbps=100, uplink_gbps=100)
    flows = [Flow(f"r:{i}", f"node00{i}/nic0", f"node00{i + 4}/nic0", 100) for i in range(4)]
    first = plan_flows(topo, flows)
    previous = {f.id: first.path(i) for i, f in enumerate(flows)}
    dead = link_id("leaf00r0", first.path(2)[2])
    again = plan_flows(topo, flows, [dead], previous=previous)
    assert again.max_link_load == pytest.approx(2.0)
    assert again.bound.value == pytest.approx(4 / 3)       # fractional: 400 G over 300 G
    assert again.bound.unsplittable == pytest.approx(2.0)  # four whole flows, three links
    assert again.solution.moved == 1


def test_no_path_names_the_flow() -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=2)
    flows = [Flow("ok", "node000/nic0", "node002/nic0", 100),
             Flow("dp.7:3>1", "node001/nic0", "node003/nic0", 100)]
    with pytest.raises(NoPathError, match=r"'dp\.7:3>1'.*leaf01r0~node003/nic0") as info:
        plan_flows(topo, flows, ["leaf01r0~node003/nic0"])
    assert info.value.flow == "dp.7:3>1"
    # Both spines gone from leaf00: no path either.
    with pytest.raises(NoPathError, match="ok"):
        plan_flows(topo, flows, ["leaf00r0~spine00", "leaf00r0~spine01"])


def test_unknown_down_link() -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=2)
    with pytest.raises(UnknownLinkError, match="spine00~leaf00r0"):
        plan_flows(topo, [Flow("a", "node000/nic0", "node002/nic0", 1)], ["spine00~leaf00r0"])


def test_equal_flows_on_a_full_fabric_reach_the_bound() -> None:
    # 128 hosts, every ring hop crosses leaves (stride 16): a perfect spine assignment exists.
    topo = rail_optimized(128, 2, hosts_per_leaf=16, spines=16)
    hosts = topo.hosts()
    order = [hosts[(i % 8) * 16 + i // 8] for i in range(128)]
    flows = []
    for r in range(2):
        for i in range(128):
            a, b = order[i], order[(i + 1) % 128]
            flows.append(Flow(f"dp.{r}:{i}>{(i + 1) % 128}", f"{a}/nic{r}", f"{b}/nic{r}", 400))
    res = plan_flows(topo, flows, ecmp_seeds=2)
    assert res.bound.value == pytest.approx(1.0)
    assert res.max_link_load == pytest.approx(1.0)
    assert min(res.ecmp.max_loads) > 1.0


def test_arbitrary_fabric_two_stages_of_choice() -> None:
    # h0 - a <b|c> d <e|f> g - h1: four equal paths, choices at a and at d.
    g = nx.Graph()
    for h in ("h0", "h1"):
        g.add_node(h, kind="host")
        g.add_node(f"{h}/nic0", kind="nic", host=h)
        g.add_edge(h, f"{h}/nic0")
    for s in "abcdefg":
        g.add_node(s, kind="switch")
    g.add_edges_from([("h0/nic0", "a"), ("g", "h1/nic0")], gbps=400)
    g.add_edges_from([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e"), ("d", "f"),
                      ("e", "g"), ("f", "g")], gbps=100)
    topo = Topology(g)
    flows = [Flow(f"x:{i}", "h0/nic0", "h1/nic0", 50) for i in range(4)]
    res = plan_flows(topo, flows, ecmp_seeds=32)
    assert res.max_link_load == pytest.approx(1.0) == res.bound.value
    assert Counter(res.path(f)[2] for f in range(4)) == {"b": 2, "c": 2}
    assert Counter(res.path(f)[4] for f in range(4)) == {"e": 2, "f": 2}
    # The pinned ports steer every flow onto its path through both choices.
    model = EcmpModel(res.problem)
    assert model.place(res.sports) == res.solution.choice
    assert res.ecmp.worst >= 1.5          # some draws put three or four flows on one link


@pytest.mark.parametrize("seed", range(5))
def test_bipartite_edge_colouring_is_proper(seed) -> None:
    # A random 8-regular bipartite multigraph on 30 + 30 vertices needs exactly 8 colours.
    rng = np.random.default_rng(seed)
    edges = [(u, int(v)) for _ in range(8) for u, v in enumerate(rng.permutation(30))]
    colours = _bipartite_edge_colouring(edges, 30, 30, 8)
    for end in (0, 1):
        seen = {(e[end], c) for e, c in zip(edges, colours, strict=True)}
        assert len(seen) == len(edges)           # no colour twice at a vertex
    assert set(colours) <= set(range(8))


def test_colouring_applies_only_where_it_is_exact() -> None:
    topo = rail_optimized(128, 2, hosts_per_leaf=16, spines=16)
    hosts = topo.hosts()
    order = [hosts[(i % 8) * 16 + i // 8] for i in range(128)]
    flows = [Flow(f"dp.{r}:{i}", f"{order[i]}/nic{r}", f"{order[(i + 1) % 128]}/nic{r}", 400)
             for r in range(2) for i in range(128)]
    assert colour(build_problem(topo, flows)) is not None
    # Uneven demands, or a failed link (spines differ between leaf pairs): the general solver.
    uneven = [*flows[:-1], Flow("odd", flows[-1].src, flows[-1].dst, 300)]
    assert colour(build_problem(topo, uneven)) is None
    assert colour(build_problem(topo, flows, ["leaf00r0~spine03"])) is None
    res = plan_flows(topo, uneven, ecmp_seeds=0)
    assert res.max_link_load == pytest.approx(1.0)
