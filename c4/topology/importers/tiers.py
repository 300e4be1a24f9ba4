"""Switch tiers. Few sources say which switch is a leaf and which a spine (an ``ibnetdiscover``
dump does not; Slurm gives levels; cloud APIs give layers), so a switch's level is its height
above the hosts: 0 for a switch with NICs (a leaf), then one more per switch hop away from the
nearest leaf. Levels 0, 1 and 2 are the format's tiers ``leaf``, ``spine`` and ``core``; a
switch higher than that keeps its ``level`` and has no tier."""

from __future__ import annotations

from collections import Counter, deque

from c4.topology.importers.common import Fabric, few
from c4.topology.model import TIERS


def tier_of_level(level: int) -> str | None:
    return TIERS[level] if 0 <= level < len(TIERS) else None


def set_level(fabric: Fabric, switch: str, level: int) -> None:
    """Give a switch its level and the tier that goes with it."""
    d = fabric.graph.nodes[switch]
    d["level"] = level
    tier = tier_of_level(level)
    if tier is None:
        d.pop("tier", None)
    else:
        d["tier"] = tier


def infer_tiers(fabric: Fabric) -> None:
    """Levels and tiers from the graph's shape: leaves are the switches with NICs; every other
    switch is one level above the nearest switch below it. Reports switches that reach no NIC,
    switches above the core tier, and links inside one tier (so that paths need a graph
    search)."""
    g = fabric.graph
    switches = [n for n, d in g.nodes(data=True) if d.get("kind") == "switch"]
    level: dict[str, int] = {}
    queue: deque[str] = deque()
    for s in switches:
        if any(g.nodes[n].get("kind") == "nic" for n in g.adj[s]):
            level[s] = 0
            queue.append(s)
    while queue:
        s = queue.popleft()
        for n in g.adj[s]:
            if n not in level and g.nodes[n].get("kind") == "switch":
                level[n] = level[s] + 1
                queue.append(n)
    for s, lv in level.items():
        set_level(fabric, s, lv)
    apply_level_reports(fabric, level, [s for s in switches if s not in level])


def apply_level_reports(fabric: Fabric, level: dict[str, int], unplaced: list[str]) -> None:
    """The issues that levels raise (shared by sources that give levels themselves)."""
    g = fabric.graph
    if unplaced:
        fabric.warn(f"{len(unplaced)} switch(es) reach no NIC ({few(unplaced)}): no tier "
                    "given; traffic between hosts never crosses them")
    high = sorted(s for s, lv in level.items() if tier_of_level(lv) is None)
    if high:
        fabric.info(f"{len(high)} switch(es) sit above the core tier ({few(high)}): c4's "
                    "tiers are leaf, spine, core, so they keep only 'level'; paths through them "
                    "are found by graph search")
    flat: Counter[str] = Counter()
    for u, v in g.edges():
        if (u in level and v in level and level[u] == level[v]
                and g.nodes[u].get("kind") == g.nodes[v].get("kind") == "switch"):
            flat[tier_of_level(level[u]) or f"level {level[u]}"] += 1
    for tier, n in sorted(flat.items()):
        fabric.info(f"{n} link(s) join two switches of tier {tier}: paths on this fabric are "
                    "found by graph search, not by climbing tiers")
