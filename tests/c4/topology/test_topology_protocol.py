"""``TopologyLike``: the networkx model answers every question of the protocol, and the engine
asks a topology nothing else (it localizes the same through an object that answers only the
protocol's questions)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from c4.topology import Topology, TopologyError, TopologyLike, rail_optimized
from diagnosis.engine import Engine
from diagnosis.sim.config import FaultSpec, SimConfig
from diagnosis.sim.run import simulate
from diagnosis.trace.feed import feed_trace

MEMBERS = sorted(n for n, v in vars(TopologyLike).items()
                 if callable(v) and (not n.startswith("_") or n == "__contains__"))


class OnlyProtocol:
    """Answers the protocol's questions by asking a real topology, and has nothing else (no
    ``graph``, no ``index``): an engine that reached past the protocol fails on it."""

    def __init__(self, topo: Topology) -> None:
        self._topo = topo


def _forward(name: str) -> Any:
    return lambda self, *args, **kw: getattr(self._topo, name)(*args, **kw)


for _name in MEMBERS:
    setattr(OnlyProtocol, _name, _forward(_name))


def test_the_protocol_names_what_the_engine_needs() -> None:
    assert {"__contains__", "has_link", "kind", "gpus", "nics", "paths", "links_of",
            "capacity", "neighbors", "default_placement"} <= set(MEMBERS)


def test_the_model_answers_every_question_of_the_protocol_with_its_signature() -> None:
    topo = rail_optimized(2, 4)
    assert isinstance(topo, TopologyLike)
    for name in MEMBERS:
        want = list(inspect.signature(getattr(TopologyLike, name)).parameters)
        got = list(inspect.signature(getattr(Topology, name)).parameters)
        assert got == want, f"Topology.{name}{got} differs from the protocol's {want}"


def test_membership_is_asked_not_caught() -> None:
    topo = rail_optimized(2, 4)
    nic = topo.nics()[0]
    [link] = [lk for lk in topo.links_of(nic) if "switch" in {topo.kind(n)
                                                             for n in lk.split("~")}][:1]
    assert nic in topo and "node99/nic0" not in topo and 3 not in topo
    assert topo.has_link(link) and not topo.has_link("a~b")
    assert set(topo.neighbors(nic)) >= set(link.split("~")) - {nic}
    with pytest.raises(TopologyError, match="not in the topology"):
        topo.neighbors("node99/nic0")


#: a slow uplink and a slow switch (localized by the peers' load model: membership, links and
#: capacities of the recorded paths) and a dead cable (by the hang's recorded paths)
FAULTS = ["slow_link:auto@4,slow=4", "dead_link:cable@4", "slow_switch:spine@4,slow=4"]


@pytest.mark.parametrize("spec", FAULTS)
def test_the_engine_localizes_the_same_through_the_protocol_alone(tmp_path: Path,
                                                                  spec: str) -> None:
    cfg = SimConfig(gpus=64, iterations=16, microbatches=2, seed=5, hosts_per_leaf=2,
                    faults=(FaultSpec.parse(spec),))
    res = simulate(cfg, tmp_path)
    topo = Topology.load(res.topology)
    direct, _ = feed_trace(Engine(topo), res.trace)
    proxied, _ = feed_trace(Engine(OnlyProtocol(topo)), res.trace)  # type: ignore[arg-type]
    [planted] = json.loads(res.truth.read_text())["faults"]
    named = {s.id for f in direct for s in f.suspects}
    assert planted["component"]["id"] in named, f"{spec}: the engine named {named}"
    assert [(f.kind, [(s.type, s.id) for s in f.suspects]) for f in proxied] == \
        [(f.kind, [(s.type, s.id) for s in f.suspects]) for f in direct]
