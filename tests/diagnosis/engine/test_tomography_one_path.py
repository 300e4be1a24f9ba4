"""``PathCache.on_one_path``: whether some candidate (ECMP) route between two NICs crosses
every one of a set of components, what tells a hang placed on one path from a tie across
routes. The fabric is the simulator's rail fabric, two hosts per leaf and two spines."""

from __future__ import annotations

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
