"""The part of a large topology worth drawing: the suspects, their hosts (GPUs and NICs), the
switches those NICs attach to and the switches above them. A fabric of thousands of GPUs drawn
whole is a grey blob; its fault's neighbourhood has a few dozen nodes, every suspect among
them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

    from c4.topology import Topology

TIER_RANK = {"core": 0, "spine": 1, "leaf": 2}


@dataclass
class Neighbourhood:
    nodes: set[str]
    #: hosts attached to the drawn switches but left out
    hidden_hosts: int


def _tier(g: nx.Graph, n: str) -> int:
    return TIER_RANK.get(g.nodes[n].get("tier"), 2)


def neighbourhood(topology: Topology, seeds: set[str]) -> Neighbourhood:
    """The nodes around ``seeds`` (suspect nodes and the ends of suspect links), see above."""
    g = topology.graph
    seeds = {s for s in seeds if s in g}
    keep: set[str] = set(seeds)
    for s in seeds:
        kind = g.nodes[s].get("kind")
        if kind in ("gpu", "nic", "host"):
            host = topology.host_of(s)
            keep.add(host)
            keep.update(topology.gpus(host))
            keep.update(topology.nics(host))
    switches = {n for n in keep if g.nodes[n].get("kind") == "switch"}
    for n in list(keep):
        if g.nodes[n].get("kind") == "nic":
            switches.update(m for m in g.neighbors(n) if g.nodes[m].get("kind") == "switch")
    # up the tiers from every switch so far: the paths that leave the suspects' leaves
    frontier = set(switches)
    while frontier:
        up = {m for n in frontier for m in g.neighbors(n)
              if g.nodes[m].get("kind") == "switch" and _tier(g, m) < _tier(g, n)}
        frontier = up - switches
        switches |= up
    keep |= switches
    attached = {g.nodes[m].get("host") for s in switches for m in g.neighbors(s)
                if g.nodes[m].get("kind") == "nic"}
    return Neighbourhood(keep, len(attached - keep))
