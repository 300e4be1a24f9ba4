"""The lab's plan on paper (no root needed): topology ids, addresses, interface names, routes,
plan pins and the ground-truth export."""

from __future__ import annotations

import ipaddress
import time

import pytest

from c4.lab.layout import FABRIC, MGMT, LabSpec, build_layout, layout_routes
from c4.lab.plan import Pin, bench_flows, pins_from_plan
from c4.lab.system import LabError
from c4.lab.truth import truth


def test_ids_follow_the_recommended_scheme():
    lay = build_layout(LabSpec(hosts=6, gpus_per_host=2, hosts_per_leaf=2, spines=3))
    assert lay.hosts == [f"node00{i}" for i in range(6)]
    assert lay.leaves == ["leaf00", "leaf01", "leaf02"]
    assert lay.spines == ["spine0", "spine1", "spine2"]
    assert lay.leaf_of["node005"] == "leaf02"
    assert set(lay.links) == {lk for lk in lay.topology.links() if "gpu" not in lk}
    assert lay.topology.gpus("node005") == ["node005/gpu0", "node005/gpu1"]


def test_addresses_are_unique_private_and_interface_names_fit():
    lay = build_layout(LabSpec(hosts=40, gpus_per_host=1, hosts_per_leaf=10, spines=4))
    addrs = [e.addr for lk in lay.links.values() for e in (lk.a, lk.b)]
    addrs += [*lay.mgmt_addr.values(), lay.mgmt_gateway]
    assert len(addrs) == len(set(addrs))
    for a in addrs:
        assert ipaddress.ip_address(a) in FABRIC
    for lk in lay.links.values():  # each link's two ends share a /30 outside the management /24
        net = ipaddress.ip_network(f"{lk.a.addr}/30", strict=False)
        assert ipaddress.ip_address(lk.b.addr) in net and not net.overlaps(MGMT)
        for e in (lk.a, lk.b):
            assert len(e.ifname) <= 15
    names = [(e.ns, e.ifname) for lk in lay.links.values() for e in (lk.a, lk.b)]
    assert len(names) == len(set(names))


def test_routes_spread_over_every_spine():
    lay = build_layout(LabSpec(hosts=4, gpus_per_host=1, spines=3))
    routes = layout_routes(lay)
    leaf = routes["c4l-leaf00"][0]
    assert leaf.count("nexthop") == 3
    assert [r for r in routes["c4l-leaf00"] if "table 102" in r]
    assert len(routes["c4l-spine2"]) == len(lay.leaves)


def test_invalid_specs_are_refused_naming_the_flag():
    for bad, message in ((dict(hosts=0), "--hosts must be from 1 to 200, got 0"),
                         (dict(gpus_per_host=0), "--gpus-per-host must be at least 1, got 0"),
                         (dict(spines=17), "--spines must be from 1 to 16, got 17"),
                         (dict(host_mbit=0), "--host-mbit must be at least 1, got 0")):
        with pytest.raises(LabError) as err:
            LabSpec(**bad)
        assert str(err.value) == message


def test_pins_from_a_plan_take_the_spine_of_each_cross_leaf_path():
    lay = build_layout(LabSpec(hosts=4, gpus_per_host=1))
    assert bench_flows(lay) == [("node000", "node002"), ("node001", "node003")]
    plan = {"plan": [
        {"src": "node000/nic0", "dst": "node002/nic0",
         "path": ["node000/nic0", "leaf00", "spine1", "leaf01", "node002/nic0"]},
        {"src": "node000/nic0", "dst": "node001/nic0",
         "path": ["node000/nic0", "leaf00", "node001/nic0"]}]}
    assert pins_from_plan(lay, plan) == [Pin("node000", "node002", "spine1")]


def test_truth_names_the_component_and_what_a_report_may_name(tmp_path):
    lay = build_layout(LabSpec(hosts=4, gpus_per_host=2))
    lay.topology.save(tmp_path / "t.json")
    now = time.time()
    st = {"topology": str(tmp_path / "t.json"), "faults": [
        {"id": 1, "kind": "slow-link", "target": "node003/nic0", "components":
         ["leaf01~node003/nic0"], "injected_at": now, "cleared_at": now + 5},
        {"id": 2, "kind": "slow-gpu", "target": "rank:3", "components": ["node001/gpu1"],
         "ranks": [3], "injected_at": now, "cleared_at": None}]}
    link, gpu = truth(st)["faults"]
    assert link["kind"] == "slow_link" and link["expected_report"] == "comm_slow"
    assert {"type": "nic", "id": "node003/nic0"} in link["accept"]
    assert link["end_ns"] - link["onset_ns"] == pytest.approx(5e9, rel=1e-6)
    assert gpu["component"] == {"type": "gpu", "id": "node001/gpu1"}
    assert {"type": "rank", "id": "3"} in gpu["accept"] and gpu["end_ns"] is None
