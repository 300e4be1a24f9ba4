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

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from c4.topology.protocol import TopologyError, TopologyLike

log = logging.getLogger(__name__)

KIND_ORDER = {"nic": 0, "link": 1, "switch": 2}


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

    def _components(self, path: Sequence[str]) -> frozenset[Component]:
        out: set[Component] = set()
        for node in path:
            if node not in self.topo:   # a recorded hop the topology does not have
                continue
            kind = self.topo.kind(node)
            if kind in ("nic", "switch"):
                out.add(Component(kind, node))
        for lk in self.topo.path_links(list(path)):
            out.add(Component("link", lk))
        return frozenset(out)

    def recorded(self, path: tuple[str, ...]) -> frozenset[Component]:
        found = self._recorded.get(path)
        if found is None:
            found = self._recorded[path] = self._components(path)
        return found

    def between(self, src_nic: str, dst_nic: str) -> tuple[frozenset[Component],
                                                          frozenset[Component]]:
        """(may, must) component sets of the traffic from one NIC to another."""
        key = (src_nic, dst_nic)
        found = self._cache.get(key)
        if found is None:
            if src_nic == dst_nic:
                found = (frozenset(), frozenset())
            else:
                try:
                    paths = self.topo.paths(src_nic, dst_nic)
                except TopologyError as exc:   # an end the topology lacks, or not a NIC
                    log.debug("no paths %s -> %s: %s", src_nic, dst_nic, exc)
                    paths = []
                sets = [self._components(p) for p in paths]
                if sets:
                    found = (frozenset().union(*sets), frozenset.intersection(*sets))
                else:
                    found = (frozenset(), frozenset())
            self._cache[key] = found
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
