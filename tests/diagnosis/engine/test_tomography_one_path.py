"""``PathCache.on_one_path``: whether some candidate (ECMP) route between two NICs crosses
every one of a set of components, what tells a hang placed on one path from a tie across
routes. The fabric is the simulator's rail fabric, two hosts per leaf and two spines."""

from __future__ import annotations

import numpy as np
import pytest

from c4.topology.fabrics import FABRICS, build_fabric
from diagnosis.engine.tomography import Component, PathCache
from diagnosis.sim.config import SimConfig
from diagnosis.sim.model import build_topology


def _cache() -> PathCache:
    return PathCache(build_topology(SimConfig(gpus=64, hosts_per_leaf=2)))


def test_components_of_one_route_lie_on_one_path() -> None:
    cache = _cache()
    a, b = "node000/nic0", "node002/nic0"          # leaves leaf00r0 and leaf01r0
    may, must = cache.between(a, b)
    spines = sorted(c for c in may if c.id.startswith("spine"))
    assert len(spines) == 2 and not set(spines) & must
    route = frozenset({Component("switch", "leaf00r0"), spines[0],
                       Component("switch", "leaf01r0")})
    assert cache.on_one_path(a, b, route)
    assert cache.on_one_path(a, b, frozenset({Component("nic", a), Component("nic", b)}))


def test_components_of_different_routes_do_not() -> None:
    cache = _cache()
    a, b = "node000/nic0", "node002/nic0"
    spines = frozenset(c for c in cache.between(a, b)[0] if c.id.startswith("spine"))
    assert not cache.on_one_path(a, b, spines)
    # a component off every route between them
    assert not cache.on_one_path(a, b, frozenset({Component("switch", "leaf01r1")}))
    assert not cache.on_one_path(a, a, frozenset({Component("nic", a)}))


@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_the_sets_between_nics_are_those_of_their_paths(fabric: str) -> None:
    """The sets between two switches are walked once and shared by every pair of NICs on
    them: each pair's sets are still exactly those of its own candidate paths."""
    topo = build_fabric(fabric, 24, 4, hosts_per_leaf=4)
    cache = PathCache(topo)
    nics = topo.nics()
    rng = np.random.default_rng(0)
    pairs = [(nics[i], nics[j]) for i, j in rng.integers(0, len(nics), size=(400, 2))]

    def walked(a: str, b: str) -> tuple[frozenset, frozenset]:
        sets = [frozenset({Component(topo.kind(n), n) for n in p
                           if topo.kind(n) in ("nic", "switch")}
                          | {Component("link", lk) for lk in topo.path_links(p)})
                for p in (topo.paths(a, b) if a != b else [])]
        return (frozenset().union(*sets), frozenset.intersection(*sets)) if sets \
            else (frozenset(), frozenset())

    asked: list[tuple[str, str]] = []
    paths = topo.paths
    topo.paths = lambda a, b: asked.append((a, b)) or paths(a, b)   # type: ignore[method-assign]
    got = {(a, b): cache.between(a, b) for a, b in pairs}
    topo.paths = paths                                              # type: ignore[method-assign]
    for (a, b), sets in got.items():
        assert sets == walked(a, b), (a, b)
    assert any(must for _, must in got.values())

    def up(nic: str) -> tuple[str, ...]:
        return tuple(n for n in topo.neighbors(nic) if topo.kind(n) == "switch")

    if fabric == "dual_port":            # NICs on two switches: each pair walked
        assert len(asked) == len({(a, b) for a, b in pairs if a != b})
    else:
        assert len(asked) == len({(up(a), up(b)) for a, b in pairs if a != b}), \
            "walked once per pair of switches"
