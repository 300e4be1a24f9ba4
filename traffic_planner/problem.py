"""The routing problem: flows, their candidate paths, and the directed links they load.

Links are full duplex, so each direction of a link is a resource of its own (an *arc*). For each
flow the arcs that every candidate path crosses (its NIC links, say) are *fixed*: they are loaded
whatever path is chosen. The solver only looks at the *variable* arcs, which is what makes it
fast on fabrics with hundreds of thousands of candidate paths. Candidates are equal-cost shortest
paths, so an arc sits at the same position in every candidate that has it; variable arcs are kept
in path order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from c4.topology import Topology, link_id
from traffic_planner.errors import NoPathError, UnknownLinkError
from traffic_planner.flows import Flow, check_flows

log = logging.getLogger(__name__)


@dataclass
class Problem:
    topology: Topology
    flows: list[Flow]
    down: frozenset[str]
    arcs: list[tuple[str, str]]             # arc index -> (from, to)
    cap: list[float]                        # arc index -> gbps
    fixed: list[tuple[int, ...]]            # flow -> arcs on every candidate
    cands: list[list[tuple[int, ...]]]      # flow -> candidate -> its other arcs (shared lists)
    arc_ix: dict[tuple[str, str], int] = field(default_factory=dict)   # (from, to) -> arc
    demand: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.demand = [f.gbps for f in self.flows]

    def path_arcs(self, f: int, k: int) -> tuple[int, ...]:
        return self.fixed[f] + self.cands[f][k]

    def path(self, f: int, k: int) -> list[str]:
        """Candidate ``k`` of flow ``f`` as node ids from its source NIC to its destination."""
        nxt = dict(self.arcs[a] for a in self.path_arcs(f, k))
        node, out = self.flows[f].src, [self.flows[f].src]
        while node in nxt:
            node = nxt[node]
            out.append(node)
        return out

    def candidate_of(self, f: int, path: Sequence[str]) -> int | None:
        """The index of the candidate of flow ``f`` that is ``path``, if any."""
        get = self.arc_ix.get
        arcs = [get((u, v)) for u, v in zip(path, path[1:])]  # noqa: RUF007
        fixed = set(self.fixed[f])
        if None in arcs or not fixed.issubset(arcs):
            return None
        var = tuple(a for a in arcs if a not in fixed)     # in path order, as candidates are
        try:
            return self.cands[f].index(var)
        except ValueError:
            return None

    def loads(self, choice: Sequence[int]) -> list[float]:
        """Utilisation of every arc when flow ``f`` takes candidate ``choice[f]``."""
        load = [0.0] * len(self.arcs)
        for f, k in enumerate(choice):
            d = self.demand[f]
            for a in self.fixed[f]:
                load[a] += d
            for a in self.cands[f][k]:
                load[a] += d
        return [ld / c for ld, c in zip(load, self.cap, strict=True)]


class _Arcs:
    """Arc numbering, created on first use."""

    def __init__(self, topology: Topology) -> None:
        self.adj = topology.graph._adj   # plain dicts: the views cost microseconds per lookup
        self.ix: dict[tuple[str, str], int] = {}
        self.arcs: list[tuple[str, str]] = []
        self.cap: list[float] = []

    def __call__(self, u: str, v: str) -> int:
        i = self.ix.get((u, v))
        if i is None:
            i = self.ix[(u, v)] = len(self.arcs)
            self.arcs.append((u, v))
            self.cap.append(float(self.adj[u][v].get("gbps", float("inf"))))
        return i

    def both_ways(self, pairs: list[tuple[str, str]]) -> None:
        """Number the arcs of many links at once (both directions, in a tight loop)."""
        adj, ix, arcs, cap, inf = self.adj, self.ix, self.arcs, self.cap, float("inf")
        for u, v in pairs:
            if (u, v) not in ix:
                c = float(adj[u][v].get("gbps", inf))
                ix[(u, v)], ix[(v, u)] = len(arcs), len(arcs) + 1
                arcs.extend(((u, v), (v, u)))
                cap.extend((c, c))


def build_problem(topology: Topology, flows: Sequence[Flow],
                  down: Iterable[str] = ()) -> Problem:
    """Candidate paths for every flow that avoid the ``down`` links.

    Raises:
        FlowFormatError: a flow names a NIC that is not in the topology.
        UnknownLinkError: a down link is not in the topology.
        NoPathError: some flow has no path left; the message names it.
    """
    flows = list(flows)
    check_flows(flows, topology)
    down = frozenset(down)
    known = topology.index.links
    for lk in sorted(down):
        if lk not in known:
            raise UnknownLinkError(f"down link {lk!r} is not in the topology; a link id is two "
                                   "node ids, sorted, joined by '~'")
    arc = _Arcs(topology)
    fixed: list[tuple[int, ...]] = []
    cands: list[list[tuple[int, ...]]] = []
    interned: dict[tuple[tuple[int, ...], ...], list[tuple[int, ...]]] = {}
    two_tier = _TwoTier(topology, arc, down) if topology.index.two_tier else None
    for f in flows:
        got = two_tier.candidates(f.src, f.dst) if two_tier else None
        if got is None:
            got = _generic(topology, arc, down, f.src, f.dst)
        if got is None:
            dead = sorted(lk for lk in down if f.src in lk.split("~") or f.dst in lk.split("~"))
            hint = f" (down links at its ends: {', '.join(dead)})" if dead else ""
            raise NoPathError(f"flow {f.id!r} from {f.src} to {f.dst} has no path left"
                              f"{hint}; bring a link back or drop the flow", flow=f.id)
        fx, cs = got
        if not isinstance(cs, list):
            cs = interned.setdefault(cs, list(cs))
        fixed.append(fx)
        cands.append(cs)
    if any(not c > 0 for c in arc.cap):
        u, v = arc.arcs[next(i for i, c in enumerate(arc.cap) if not c > 0)]
        raise UnknownLinkError(f"link {link_id(u, v)!r} has no capacity")
    log.debug("problem: %d flows, %d arcs", len(flows), len(arc.arcs))
    return Problem(topology, flows, down, arc.arcs, arc.cap, fixed, cands, arc.ix)


def _split(arc_paths: list[list[int]]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(arcs common to all candidates, each candidate's other arcs), in path order."""
    if len(arc_paths) == 1:
        return tuple(arc_paths[0]), ((),)
    common = set(arc_paths[0]).intersection(*arc_paths[1:])
    return (tuple(a for a in arc_paths[0] if a in common),
            tuple(tuple(a for a in ap if a not in common) for ap in arc_paths))


def _generic(topology: Topology, arc: _Arcs, down: frozenset[str], src: str, dst: str):
    paths = topology.paths_avoiding(src, dst, down)
    if not paths:
        return None
    return _split([[arc(u, v) for u, v in zip(p, p[1:])] for p in paths])  # noqa: RUF007


class _TwoTier:
    """Candidates on a leaf/spine fabric from its tiers, sharing the leaf-to-leaf part between
    all flows of a leaf pair. Falls back (returns None) where the structure gives no path."""

    def __init__(self, topology: Topology, arc: _Arcs, down: frozenset[str]) -> None:
        self.ix, self.arc, self.down = topology.index, arc, down
        self.mid: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.ups: dict[str, tuple[tuple[str, ...], list[int], dict[str, int]]] = {}

    def _up(self, nic: str) -> list[str]:
        return [leaf for leaf in self.ix.nic_up.get(nic, ())
                if not self.down or link_id(nic, leaf) not in self.down]

    def _leaf(self, leaf: str) -> tuple[tuple[str, ...], list[int], dict[str, int]]:
        """A leaf's live spines, its arcs up to them, and theirs down to it (by spine)."""
        got = self.ups.get(leaf)
        if got is None:
            spines = tuple(sp for sp in self.ix.leaf_up[leaf]
                           if not self.down or link_id(leaf, sp) not in self.down)
            self.arc.both_ways([(leaf, sp) for sp in spines])
            ix = self.arc.ix
            got = self.ups[leaf] = (spines, [ix[(leaf, sp)] for sp in spines],
                                    {sp: ix[(sp, leaf)] for sp in spines})
        return got

    def _mid(self, ls: str, ld: str) -> list[tuple[int, int]]:
        got = self.mid.get((ls, ld))
        if got is None:
            sp_s, up, _ = self._leaf(ls)
            sp_d, _, down = self._leaf(ld)
            if sp_s == sp_d:            # the usual full mesh: every spine serves both leaves
                got = list(zip(up, down.values(), strict=True))
            else:
                got = [(a, down[sp]) for sp, a in zip(sp_s, up, strict=True) if sp in down]
            self.mid[(ls, ld)] = got
        return got

    def candidates(self, src: str, dst: str):
        up_s, up_d = self._up(src), self._up(dst)
        arc = self.arc
        shared = [leaf for leaf in up_s if leaf in up_d]
        if shared:
            return _split([[arc(src, leaf), arc(leaf, dst)] for leaf in shared])
        if len(up_s) == 1 and len(up_d) == 1:
            mid = self._mid(up_s[0], up_d[0])
            if not mid:
                return None
            return (arc(src, up_s[0]), arc(up_d[0], dst)), mid
        paths = [[arc(src, ls), a, b, arc(ld, dst)] for ls in up_s for ld in up_d
                 for a, b in self._mid(ls, ld)]
        return _split(paths) if paths else None
