"""A switch that stops forwarding stalls the transfers in flight across it: it is named, whichever
tier it sits in, and nothing is put before it that timing could tell from it. With few stuck
transfers, a link or NIC on every stuck path is as likely (the ground truth lists those as
equivalent). The traces come from the simulator (64 GPUs, two hosts per leaf, so traffic crosses
leaves and spines)."""

from __future__ import annotations

import json

import pytest

from c4.topology import Topology
from diagnosis.engine import Engine
from diagnosis.sim import FaultSpec, SimConfig, simulate
from diagnosis.trace.feed import feed_trace


@pytest.mark.parametrize(("fabric", "tier"), [("rail", "leaf"), ("rail", "spine"),
                                              ("tor", "spine"), ("three_tier", "core")])
def test_dead_switch_is_named_behind_nothing_distinguishable(tmp_path, fabric, tier):
    cfg = SimConfig(gpus=64, iterations=10, microbatches=2, seed=7, hosts_per_leaf=2,
                    fabric=fabric, faults=(FaultSpec.parse(f"dead_switch:{tier}@6"),))
    simulate(cfg, tmp_path)
    truth = json.loads((tmp_path / "truth.json").read_text())["faults"][0]
    engine = Engine(Topology.load(tmp_path / "topology.json"))
    reports, _ = feed_trace(engine, tmp_path / "trace.jsonl")
    assert [r.kind for r in reports] == ["comm_hang"]
    named = {(s.type, s.id): s.score for s in reports[0].suspects}
    switch = named[("switch", truth["component"]["id"])]
    same = {(a["type"], a["id"]) for a in truth["accept"] + truth["equivalent"]}
    ahead = {c for c, score in named.items() if score >= switch}
    assert ahead <= same, f"named before the dead switch: {sorted(ahead - same)}"
