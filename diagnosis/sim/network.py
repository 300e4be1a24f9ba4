"""The job's connections, their ECMP paths, and each one's bandwidth under a given fabric health.

A connection's bandwidth is the bottleneck along its path of (link capacity x health) divided by
the number of the phase's connections that cross that link in the same direction: flows of one
phase (all data-parallel rings at once; all sends across one pipeline boundary at once) share
links fairly. So a degraded fat uplink that stays above the NIC rate changes nothing, ECMP
collisions make some healthy connections persistently slower, and a slow link slows exactly the
connections routed across it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from c4.topology import Topology, link_id
from diagnosis.sim.layout import Layout


@dataclass
class Connections:
    """All connections of the job, in blocks: data-parallel ring, pipeline forward, backward.

    Block ``dp``: connection ``c`` runs from rank ``c`` to its ring successor (shape [D, P, T]).
    Blocks ``fwd``/``bwd``: shape [D, P-1, T], stage ``s`` to ``s+1`` and back.
    """

    src: np.ndarray
    dst: np.ndarray
    phase: np.ndarray           # sharing phase: 0 data-parallel, 1+s forward s, P+s backward s
    inter: np.ndarray           # crosses the network (else NVLink inside a host)
    path_json: list[str]        # the chosen path as a JSON list, "" for intra-host
    ptr: np.ndarray             # CSR over ``links`` per connection
    hop_link: np.ndarray        # undirected link index of each hop
    hop_share: np.ndarray       # connections of the same phase on that hop, same direction
    link_ids: list[str]
    link_cap: np.ndarray        # gbps per undirected link
    dp0: int
    fwd0: int
    bwd0: int
    nvlink_gbps: float
    node_kind: dict[str, str]   # topology kind of every node on a used link

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def build(cls, lay: Layout, topo: Topology, rng: np.random.Generator,
              nvlink_gbps: float) -> Connections:
        D, P, T = lay.dp, lay.pp, lay.tp
        ranks = np.arange(lay.world).reshape(D, P, T)
        srcs, dsts, phases = [], [], []
        dp0 = 0
        if D > 1:
            srcs.append(ranks.ravel())
            dsts.append(np.roll(ranks, -1, axis=0).ravel())
            phases.append(np.zeros(lay.world, dtype=np.int64))
        fwd0 = sum(len(a) for a in srcs)
        if P > 1:
            stage = np.broadcast_to(np.arange(P - 1)[None, :, None], (D, P - 1, T)).ravel()
            srcs.append(ranks[:, :-1, :].ravel())
            dsts.append(ranks[:, 1:, :].ravel())
            phases.append(1 + stage)
        bwd0 = sum(len(a) for a in srcs)
        if P > 1:
            srcs.append(ranks[:, 1:, :].ravel())
            dsts.append(ranks[:, :-1, :].ravel())
            phases.append(P + stage)
        src = np.concatenate(srcs) if srcs else np.empty(0, np.int64)
        dst = np.concatenate(dsts) if dsts else np.empty(0, np.int64)
        phase = np.concatenate(phases) if phases else np.empty(0, np.int64)
        inter = lay.host_of[src] != lay.host_of[dst]

        link_index: dict[str, int] = {}
        link_ids: list[str] = []
        hops_l: list[int] = []
        hops_dir: list[int] = []
        ptr = np.zeros(len(src) + 1, dtype=np.int64)
        path_json: list[str] = []
        choice = rng.random(len(src))
        for c in range(len(src)):
            if not inter[c]:
                path_json.append("")
                ptr[c + 1] = len(hops_l)
                continue
            a, b = lay.nic[src[c]], lay.nic[dst[c]]
            cands = topo.paths(a, b)
            path = cands[int(choice[c] * len(cands))]
            path_json.append('["' + '","'.join(path) + '"]')
            for u, v in itertools.pairwise(path):
                lid = link_id(u, v)
                i = link_index.get(lid)
                if i is None:
                    i = link_index[lid] = len(link_ids)
                    link_ids.append(lid)
                hops_l.append(i)
                hops_dir.append(0 if u <= v else 1)
            ptr[c + 1] = len(hops_l)
        hop_link = np.asarray(hops_l, dtype=np.int64)
        directed = hop_link * 2 + np.asarray(hops_dir, dtype=np.int64)
        hop_phase = np.repeat(phase, np.diff(ptr))
        key = hop_phase * (2 * max(len(link_ids), 1)) + directed
        _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        hop_share = counts[inv].astype(np.float64)
        link_cap = np.array([topo.capacity(lid) for lid in link_ids], dtype=np.float64)
        link_cap[~np.isfinite(link_cap)] = nvlink_gbps
        node_kind = {n: topo.kind(n) for lid in link_ids for n in lid.split("~")}
        return cls(src, dst, phase, inter, path_json, ptr, hop_link, hop_share, link_ids,
                   link_cap, dp0, fwd0, bwd0, nvlink_gbps, node_kind)

    def bandwidth(self, factor: np.ndarray) -> np.ndarray:
        """Bytes per ns of each connection when link ``i`` keeps ``factor[i]`` of its capacity
        (0: dead, giving bandwidth 0)."""
        bw = np.full(len(self.src), self.nvlink_gbps / 8.0)
        hops = self.link_cap[self.hop_link] * factor[self.hop_link] / self.hop_share / 8.0
        has = np.diff(self.ptr) > 0
        if has.any():
            bw[has] = np.minimum.reduceat(hops, self.ptr[:-1][has])
        return bw

    def crossing(self, links: np.ndarray) -> np.ndarray:
        """Mask of connections whose path uses any of the given link indices."""
        hit = np.isin(self.hop_link, links).astype(np.int64)
        out = np.zeros(len(self.src), dtype=bool)
        has = np.diff(self.ptr) > 0
        if has.any():
            out[has] = np.add.reduceat(hit, self.ptr[:-1][has]) > 0
        return out

    def crossing_sets(self, within: np.ndarray | None = None) -> dict[int, frozenset[int]]:
        """For each used link, the connections whose path crosses it (either direction),
        counting only the connections in the mask ``within`` if given."""
        conn_of_hop = np.repeat(np.arange(len(self.src)), np.diff(self.ptr))
        keep = np.ones(len(conn_of_hop), bool) if within is None else within[conn_of_hop]
        hop_link, conn_of_hop = self.hop_link[keep], conn_of_hop[keep]
        order = np.argsort(hop_link, kind="stable")
        links, first = np.unique(hop_link[order], return_index=True)
        groups = np.split(conn_of_hop[order], first[1:]) if len(links) else []
        return {int(k): frozenset(g.tolist()) for k, g in zip(links, groups)}

    def equivalents(self, target: frozenset[int], within: np.ndarray | None = None
                    ) -> list[tuple[str, str]]:
        """Links, NICs and switches crossed by exactly the connections ``target`` (among those in
        ``within``): ``(kind, id)`` of the components timing cannot tell apart from a fault
        that strikes exactly those connections."""
        if not target:
            return []
        sets = self.crossing_sets(within)
        out = [("link", self.link_ids[i]) for i, s in sets.items() if s == target]
        by_node: dict[str, set[int]] = {}
        for i, lid in enumerate(self.link_ids):
            for node in lid.split("~"):
                by_node.setdefault(node, set()).update(sets.get(i, ()))
        for node, conns in by_node.items():
            kind = self.node_kind[node]
            if conns == target and kind in ("nic", "switch"):
                out.append((kind, node))
        return out

    def is_uplink(self, link: str) -> bool:
        """Whether a used link joins two switches (on any tier)."""
        return all(self.node_kind[n] == "switch" for n in link.split("~"))

    def links_of_node(self, node: str) -> np.ndarray:
        """Indices of the used links that end at ``node``."""
        return np.array([i for i, lid in enumerate(self.link_ids) if node in lid.split("~")],
                        dtype=np.int64)
