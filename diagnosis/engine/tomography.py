"""Boolean network tomography: the smallest set of components that explains every slow
observation and (nearly) no healthy one.

An observation is traffic between two NICs: a connection, or a communicator whose pairs of
consecutive members exchange data. Its *may* set holds every component on any of its candidate
(ECMP) paths; its *must* set the components on all of them. A slow observation is explained by a
component in its may set; a healthy observation clears the components of its must set. Noise is
tolerated through ``purity``: a component is acceptable while at least that fraction of the
observations that surely cross it are slow. NIC and cable lie on exactly the same paths, so they
come out as one equivalence class and are named together.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from c4.topology.protocol import TopologyError, TopologyLike

log = logging.getLogger(__name__)

KIND_ORDER = {"nic": 0, "link": 1, "switch": 2}
_NONE: tuple[frozenset, frozenset] = (frozenset(), frozenset())


def _hops(path: Sequence[str]) -> set[tuple[str, ...]]:
    """The node pairs of a path, each sorted (a link's two ends in either direction)."""
    return set(map(tuple, map(sorted, itertools.pairwise(path))))


class Component(NamedTuple):
    """A network component (hashed in C: explaining sets hashes it a great many times)."""

    type: str   # nic, link or switch (rank without a topology)
    id: str


@dataclass
class Explanation:
    components: list[Component]   # equivalent components, most specific first
    explained: list[int]          # indices of the slow observations it explains
    cleared_by: int               # healthy observations that surely cross it
    score: float


class PathCache:
    """Component sets between NIC pairs from the topology's candidate paths, cached."""

    def __init__(self, topology: TopologyLike) -> None:
        self.topo = topology
        self._cache: dict[tuple[str, str], tuple[frozenset[Component], frozenset[Component]]] = {}
        self._recorded: dict[tuple[str, ...], frozenset[Component]] = {}
        self._uplinks: dict[str, str | None] = {}
        self._ends: dict[str, frozenset[Component]] = {}
        # the component of a node (None: not a NIC or switch) and of a hop (two nodes, sorted)
        self._of_node: dict[str, Component | None] = {}
        self._of_hop: dict[tuple[str, ...], Component] = {}
        # (switch, switch) -> (may, must) between them (None: no path)
        self._middle: dict[tuple[str, str], tuple[frozenset[Component],
                                                  frozenset[Component]] | None] = {}

    def recorded(self, path: tuple[str, ...]) -> frozenset[Component]:
        found = self._recorded.get(path)
        if found is None:
            found = self._recorded[path] = self._named(set(path), _hops(path))
        return found

    def between(self, src_nic: str, dst_nic: str) -> tuple[frozenset[Component],
                                                          frozenset[Component]]:
        """(may, must) component sets of the traffic from one NIC to another."""
        key = (src_nic, dst_nic)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._between(src_nic, dst_nic)
        return found

    def _between(self, a: str, b: str) -> tuple[frozenset[Component], frozenset[Component]]:
        if a == b:
            return _NONE
        up_a, up_b = self._uplink(a), self._uplink(b)
        if up_a is None or up_b is None:
            return self._walk(a, b)
        # Two NICs cabled to one switch each: every path leaves the one through its switch
        # and enters the other from its switch, and what lies between depends on the two
        # switches alone (the topology's paths cross switches only). So the sets between two
        # switches are walked once, for the first pair of NICs on them, not once per pair: a
        # job of 131,072 ranks has half a million pairs and a few thousand switch pairs.
        ends = self._end(a, up_a) | self._end(b, up_b)
        middle = self._middle.get((up_a, up_b))
        if middle is None:
            may, must = self._walk(a, b)
            middle = self._middle[(up_a, up_b)] = \
                (may - ends, must - ends) if may else None
        return (middle[0] | ends, middle[1] | ends) if middle is not None else _NONE

    def _walk(self, a: str, b: str) -> tuple[frozenset[Component], frozenset[Component]]:
        """The sets from every candidate path between two NICs."""
        try:
            paths = self.topo.paths(a, b)
        except TopologyError as exc:   # an end the topology lacks, or not a NIC
            log.debug("no paths %s -> %s: %s", a, b, exc)
            paths = []
        if not paths:
            return _NONE
        # nodes and links on any path and on every one, in C over the sets of each path (a
        # leaf pair of a large rail fabric has a path per spine: a set of components built per
        # path took most of the time of indexing half a million connections)
        nodes = [set(p) for p in paths]
        hops = [_hops(p) for p in paths]
        return (self._named(set().union(*nodes), set().union(*hops)),
                self._named(set.intersection(*nodes), set.intersection(*hops)))

    def _named(self, nodes: set[str], hops: set[tuple[str, ...]]) -> frozenset[Component]:
        """The NICs and switches among ``nodes`` (a recorded hop the topology lacks is none)
        and the links of ``hops`` (node pairs)."""
        of_node, of_hop = self._of_node, self._of_hop
        comps = [of_node[n] if n in of_node else self._node(n) for n in nodes]
        return frozenset([*(c for c in comps if c is not None),
                          *(of_hop[h] if h in of_hop else self._hop(h) for h in hops)])

    def _node(self, node: str) -> Component | None:
        kind = self.topo.kind(node) if node in self.topo else ""
        found = self._of_node[node] = Component(kind, node) if kind in ("nic", "switch") \
            else None
        return found

    def _hop(self, hop: tuple[str, ...]) -> Component:
        found = self._of_hop[hop] = Component("link", self.topo.path_links(list(hop))[0])
        return found

    def _uplink(self, nic: str) -> str | None:
        """The one switch a NIC is cabled to (None: several, none, or not a NIC)."""
        if nic not in self._uplinks:
            ups = [n for n in self.topo.neighbors(nic) if self.topo.kind(n) == "switch"] \
                if nic in self.topo and self.topo.kind(nic) == "nic" else []
            self._uplinks[nic] = ups[0] if len(ups) == 1 else None
        return self._uplinks[nic]

    def _end(self, nic: str, switch: str) -> frozenset[Component]:
        """A NIC and its cable to its switch."""
        found = self._ends.get(nic)
        if found is None:
            found = self._ends[nic] = self._named({nic}, {(nic, switch)})
        return found

    def on_one_path(self, src_nic: str, dst_nic: str, comps: frozenset[Component]) -> bool:
        """Whether one candidate path from one NIC to another crosses every one of ``comps``
        (their ``may`` set holds components of different ECMP routes too)."""
        if src_nic == dst_nic:
            return False
        try:
            paths = self.topo.paths(src_nic, dst_nic)
        except TopologyError as exc:
            log.debug("no paths %s -> %s: %s", src_nic, dst_nic, exc)
            return False
        return any(comps <= self.recorded(tuple(p)) for p in paths)


def explain(slow: Sequence[frozenset[Component]], healthy: Sequence[frozenset[Component]],
            purity: float, max_sets: int = 8,
            clearing: Callable[[Component], int] | None = None, exclusive: bool = False
            ) -> tuple[list[Explanation], list[int]]:
    """Greedy set cover of the slow observations; returns explanations and the indices of slow
    observations nothing explains. ``clearing(c)``, when given, counts the healthy observations
    surely crossing ``c`` instead of scanning ``healthy``. ``exclusive``: an observation that an
    earlier explanation took no longer counts for the purity of the next ones (a coarse
    observation, such as a communicator, crosses many components, and a component it lends
    purity to may be clean: its own slow observation a side effect of the first fault)."""
    cover: dict[Component, set[int]] = {}
    for i, may in enumerate(slow):
        for c in may:
            cover.setdefault(c, set()).add(i)
    if clearing is not None:
        cleared = {c: int(clearing(c)) for c in cover}
    else:
        cleared = dict.fromkeys(cover, 0)
        for must in healthy:
            for c in must:
                if c in cleared:
                    cleared[c] += 1
    remaining = set(range(len(slow)))
    out: list[Explanation] = []
    while remaining and len(out) < max_sets:
        best_key = None
        best: list[Component] = []
        for c, obs in cover.items():
            hit = len(obs & remaining)
            if hit == 0:
                continue
            mine = hit if exclusive else len(obs)
            pur = mine / (mine + cleared[c])
            if pur < purity:
                continue
            # more explained first, then purer, then the component crossed by less traffic
            key = (hit, pur, -(len(obs) + cleared[c]))
            if best_key is None or key > best_key:
                best_key, best = key, [c]
            elif key == best_key:
                best.append(c)
        if best_key is None:
            break
        # equivalents: same explained set and same clearing as the best
        ref = best[0]
        equiv = [c for c in best if cover[c] == cover[ref] and cleared[c] == cleared[ref]]
        equiv.sort(key=lambda c: (KIND_ORDER.get(c.type, 9), c.id))
        explained = sorted(cover[ref] & remaining)
        hit, pur, _ = best_key
        score = pur * hit / max(len(slow), 1)
        out.append(Explanation(equiv, explained, cleared[ref], score))
        remaining -= set(explained)
    return out, sorted(remaining)
