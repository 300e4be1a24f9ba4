"""The accuracy bench's scenarios on every fabric: targets the job's traffic crosses, faults that
resolve, and the rail scenarios as they always were."""

from __future__ import annotations

import pytest

from bench.accuracy.scenarios import base_config, fabric_targets, scenarios
from c4.topology.fabrics import FABRICS
from diagnosis.sim import Simulation


def targets(scs, component: str) -> list[str]:
    from diagnosis.sim.config import FAULT_KINDS

    return [f.target for sc in scs for f in sc.cfg.faults
            if FAULT_KINDS[f.kind].component == component]


def test_rail_targets_alternate_as_before():
    scs = scenarios([512], 2, True, kinds=["slow_link", "slow_switch"])
    assert targets([s for s in scs if s.label == "slow_link"], "link") == ["cable", "uplink"]
    assert targets([s for s in scs if s.label == "slow_switch"], "switch") == ["leaf", "spine"]
    assert all(s.cfg.fabric == "rail" and s.cfg.nics_per_host is None for s in scs)


@pytest.mark.parametrize(("fabric", "gpus", "links", "tiers"), [
    ("rail", 64, ("cable",), ("leaf",)),          # 8 hosts under one leaf per rail
    ("rail", 512, ("cable", "uplink"), ("leaf", "spine")),
    ("dual_port", 512, ("cable", "uplink"), ("leaf", "spine")),
    ("tor", 512, ("cable", "uplink"), ("leaf", "spine")),
    ("three_tier", 512, ("cable", "uplink"), ("leaf", "spine", "core")),
    ("single_switch", 512, ("cable",), ("leaf",)),
])
def test_targets_come_from_the_built_fabric(fabric, gpus, links, tiers):
    assert fabric_targets(base_config(gpus, True, True, fabric)) == (links, tiers)


@pytest.mark.parametrize("fabric", list(FABRICS))
def test_every_scenario_resolves_its_faults(fabric):
    scs = scenarios([512], 3, True, fabric=fabric, nics_per_host=4,
                    kinds=["slow_link", "dead_link", "slow_switch", "dead_nic"])
    _, tiers = fabric_targets(scs[0].cfg)
    assert set(targets(scs, "switch")) == set(tiers)
    for sc in scs:
        assert sc.cfg.fabric == fabric and sc.cfg.nics_per_host == 4
        sim = Simulation(sc.cfg)
        assert len(sim.faults) == len(sc.cfg.faults)


def test_longer_runs_draw_their_onsets_over_their_middle():
    """``--iterations 80``: every run that long, onsets between 35 and 60% of it, the same
    seeds as the runs of the default length."""
    default = scenarios([512], 2, False, kinds=["slow_host", "slow_link"])
    long = scenarios([512], 2, False, kinds=["slow_host", "slow_link"], iterations=80)
    assert {s.cfg.iterations for s in default} == {40}
    assert {s.cfg.iterations for s in long} == {80}
    assert [s.cfg.seed for s in long] == [s.cfg.seed for s in default]
    onsets = [f.onset for s in long for f in s.cfg.faults]
    assert onsets and all(28 <= o <= 48 for o in onsets)
