"""Slurm's view of the network (topology/tree, topology/block, topology/ring), whichever file it
came from (``topology.conf``, ``topology.yaml``, ``scontrol show topology``), made into a
topology.

Slurm names switches and the nodes under them, never NICs or capacities: each node becomes a
host with one placeholder NIC (``<host>/nic``, ``placeholder: true``) cabled to its leaf, and
links carry no ``gbps`` (``LinkSpeed`` is unitless and unused by Slurm itself). Merging the
hosts' own discovery replaces the placeholder with the real NICs. Blocks become leaf switches
(``block: true``) joined to nothing: topology/block says which nodes share a block, not how
blocks connect. Rings link hosts directly, which the format cannot express: their hosts are
imported unlinked, with ``ring`` and ``ring_position``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from c4.topology.importers.common import Fabric, TopologyImportError, few
from c4.topology.importers.tiers import apply_level_reports, set_level

MAX_SWITCH_NAME = 64


@dataclass
class SlurmSwitch:
    name: str
    switches: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    level: int | None = None         # given by scontrol show topology
    link_speed: str | None = None
    alias: str | None = None         # topograph's "# name=alias" comment
    line: int | None = None


@dataclass
class SlurmBlock:
    name: str
    nodes: list[str]
    line: int | None = None
    alias: str | None = None


@dataclass
class SlurmRing:
    name: str
    nodes: list[str]
    line: int | None = None


@dataclass
class SlurmTopology:
    """One Slurm topology: a tree's switches, or blocks (with their sizes), or rings."""

    name: str = "default"
    switches: dict[str, SlurmSwitch] = field(default_factory=dict)
    blocks: list[SlurmBlock] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)
    rings: list[SlurmRing] = field(default_factory=list)

    @property
    def plugin(self) -> str:
        return "tree" if self.switches else "block" if self.blocks else \
            "ring" if self.rings else "empty"


def to_fabric(topo: SlurmTopology, fabric: Fabric) -> Fabric:
    fabric.graph.graph["slurm_topology"] = topo.name
    if topo.plugin == "tree":
        _tree(topo, fabric)
    elif topo.plugin == "block":
        _blocks(topo, fabric)
    elif topo.plugin == "ring":
        _rings(topo, fabric)
    else:
        raise TopologyImportError(f"topology {topo.name!r} lists no switches, blocks or rings: "
                                  "nothing to import", source=fabric.source)
    return fabric.finish()


# ----- tree -------------------------------------------------------------------------------
def _tree(topo: SlurmTopology, fabric: Fabric) -> None:
    sw = topo.switches
    for s in sw.values():
        if len(s.name) > MAX_SWITCH_NAME:
            fabric.warn(f"switch name {s.name[:20]!r}… is longer than Slurm's "
                        f"{MAX_SWITCH_NAME} characters", line=s.line)
        for child in s.switches:
            if child not in sw:
                fabric.warn(f"switch {s.name!r} lists switch {child!r}, which is never "
                            "defined: added with no nodes", line=s.line)
    for s in list(sw.values()):
        for child in s.switches:
            sw.setdefault(child, SlurmSwitch(child))
    level = _levels(topo, fabric)
    for name, s in sw.items():
        fabric.add_switch(name, alias=s.alias, link_speed=s.link_speed)
    for s in sw.values():
        for child in s.switches:
            fabric.link(child, s.name)
    _attach_nodes(topo, level, fabric)
    for name, lv in level.items():
        set_level(fabric, name, lv)
    empty = sorted(n for n, s in sw.items() if not s.switches and not s.nodes)
    if empty:
        fabric.warn(f"{len(empty)} switch(es) have no nodes and no switches below "
                    f"({few(empty)}): nothing crosses them")
    apply_level_reports(fabric, level, [])
    if any(s.link_speed for s in sw.values()):
        fabric.info("LinkSpeed is unitless (Slurm does not use it): kept as 'link_speed' on "
                    "the switches, not as a capacity")
    roots = _components(fabric)
    if len(roots) > 1:
        fabric.info(f"{len(roots)} separate trees with no common switch (tops: "
                    f"{few(roots)}): Slurm runs no job across them, and no path joins them")


def _levels(topo: SlurmTopology, fabric: Fabric) -> dict[str, int]:
    """Each switch's level: as scontrol gave it, or its height above its nodes (0 for a switch
    with no switches below). A cycle of switches is an error."""
    sw = topo.switches
    if all(s.level is not None for s in sw.values()):
        given = {n: int(s.level) for n, s in sw.items() if s.level is not None}
        for s in sw.values():
            for child in s.switches:
                if given[child] >= given[s.name]:
                    fabric.warn(f"switch {s.name!r} (level {given[s.name]}) lists {child!r} "
                                f"of level {given[child]} below it", line=s.line)
        return given
    order = _topological(topo, fabric)
    level: dict[str, int] = {}
    for name in order:     # children first
        kids = sw[name].switches
        level[name] = 1 + max(level[k] for k in kids) if kids else 0
    return level


def _topological(topo: SlurmTopology, fabric: Fabric) -> list[str]:
    g = nx.DiGraph()
    for s in topo.switches.values():
        g.add_node(s.name)
        g.add_edges_from((child, s.name) for child in s.switches)
    try:
        return list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible:
        cycle = [u for u, _ in nx.find_cycle(g)]
        line = topo.switches[cycle[0]].line
        raise TopologyImportError(f"switches list each other in a cycle ({' -> '.join(cycle)}): "
                                  "a tree has none; fix the Switches= lists",
                                  source=fabric.source, line=line) from None


def _attach_nodes(topo: SlurmTopology, level: dict[str, int], fabric: Fabric) -> None:
    """Each node under the lowest switch that lists it (scontrol lists a node on every switch
    above it too); a node two switches of that level list is kept under the first."""
    home: dict[str, str] = {}
    for s in sorted(topo.switches.values(), key=lambda s: level[s.name]):
        for node in s.nodes:
            prev = home.get(node)
            if prev is None:
                home[node] = s.name
            elif level[prev] == level[s.name]:
                fabric.warn(f"node {node!r} is listed under {prev!r} and {s.name!r}: kept "
                            f"under {prev!r}", line=s.line)
    ancestors = _ancestor_sets(topo)
    for s in topo.switches.values():
        for node in s.nodes:
            if home[node] != s.name and s.name not in ancestors[home[node]]:
                fabric.warn(f"node {node!r} is listed under {s.name!r}, which is not above its "
                            f"switch {home[node]!r}", line=s.line)
    for node, switch in home.items():
        if fabric.graph.has_node(node) and fabric.graph.nodes[node].get("kind") == "switch":
            raise TopologyImportError(f"{node!r} is both a node and a switch name",
                                      source=fabric.source, line=topo.switches[switch].line)
        fabric.add_cable(fabric.add_placeholder_nic(node), switch)


def _ancestor_sets(topo: SlurmTopology) -> dict[str, set[str]]:
    parents: dict[str, list[str]] = {n: [] for n in topo.switches}
    for s in topo.switches.values():
        for child in s.switches:
            parents[child].append(s.name)
    out: dict[str, set[str]] = {}

    def up(n: str) -> set[str]:
        if n not in out:
            out[n] = set()
            for p in parents[n]:
                out[n] |= {p} | up(p)
        return out[n]

    for n in topo.switches:
        up(n)
    return out


def _components(fabric: Fabric) -> list[str]:
    """The top switch of each connected part of the switch graph."""
    g = fabric.graph
    sw = g.subgraph(n for n, d in g.nodes(data=True) if d.get("kind") == "switch")
    tops = []
    for comp in nx.connected_components(sw):
        tops.append(max(comp, key=lambda n: (g.nodes[n].get("level", 0), n)))
    return sorted(tops)


# ----- blocks and rings -------------------------------------------------------------------
def _blocks(topo: SlurmTopology, fabric: Fabric) -> None:
    seen: dict[str, str] = {}
    for b in topo.blocks:
        fabric.add_switch(b.name, block=True, alias=b.alias)
        set_level(fabric, b.name, 0)
        for node in b.nodes:
            if node in seen:
                fabric.warn(f"node {node!r} is in blocks {seen[node]!r} and {b.name!r}: kept in "
                            f"{seen[node]!r}", line=b.line)
                continue
            seen[node] = b.name
            fabric.add_cable(fabric.add_placeholder_nic(node), b.name)
    sizes = topo.block_sizes
    if sizes:
        fabric.graph.graph["block_sizes"] = sizes
        base = sizes[0]
        bad = [s for s in sizes[1:] if s % base or (s // base) & (s // base - 1)]
        if bad:
            fabric.warn(f"BlockSizes {sizes}: {bad} not a power-of-two multiple of the base "
                        f"block size {base}")
    fabric.info(f"{len(topo.blocks)} blocks imported as leaf switches joined to nothing: "
                "topology/block says which nodes share a block, not how blocks connect (merge "
                "a fabric source such as ibnetdiscover for that)")


def _rings(topo: SlurmTopology, fabric: Fabric) -> None:
    for r in topo.rings:
        for i, node in enumerate(r.nodes):
            fabric.add_host(node, ring=r.name, ring_position=i)
    fabric.warn(f"{len(topo.rings)} ring(s) imported as hosts without links: a ring joins "
                "hosts directly, which the topology format (NICs cabled to switches) cannot "
                "express")
