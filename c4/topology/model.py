"""The cluster graph (shared specs section 1): hosts, GPUs, NICs and switches, and the paths that
traffic between two NICs may take through the switches."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import networkx as nx

from c4.errors import FormatError
from c4.jsonfile import read_json
from c4.topology.protocol import TopologyError

KINDS = ("host", "gpu", "nic", "switch")
TIERS = ("leaf", "spine", "core")


def link_id(a: str, b: str) -> str:
    """The id of the link between ``a`` and ``b``: the two endpoints, sorted, joined by ``~``."""
    return f"{a}~{b}" if a <= b else f"{b}~{a}"


def natural_key(s: str) -> tuple[Any, ...]:
    """Sort key under which ``gpu2`` comes before ``gpu10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


class Topology:
    """A networkx model of the cluster (the :class:`~c4.topology.protocol.TopologyLike` c4
    ships).

    Node attributes: ``kind`` (host/gpu/nic/switch), ``host`` (for gpu and nic), ``tier`` (for a
    switch), ``rail`` (for a nic). Edge attribute ``gbps``. Build one with :meth:`load`,
    :meth:`from_json` or the builders in :mod:`c4.topology.builders`; treat the graph as
    read-only afterwards (indexes and paths are cached).
    """

    def __init__(self, graph: nx.Graph) -> None:
        self.graph = graph
        self._paths: dict[tuple[str, str], list[list[str]]] = {}
        self._index: _Index | None = None

    # ----- reading and writing -------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> Topology:
        """Read a node-link JSON file; :class:`FormatError` names the node, link and field."""
        path = Path(path)
        obj = read_json(path, "topology file")
        return cls.from_json(obj, source=str(path))

    @classmethod
    def from_json(cls, obj: dict[str, Any], source: str = "") -> Topology:
        """Build from the object written by ``networkx.node_link_data(G, edges="links")``."""
        return cls(_parse(obj, source))

    def to_json(self) -> dict[str, Any]:
        return nx.node_link_data(self.graph, edges="links")

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")

    # ----- nodes --------------------------------------------------------------------------
    @property
    def index(self) -> _Index:
        if self._index is None:
            self._index = _Index(self.graph)
        return self._index

    def hosts(self) -> list[str]:
        return list(self.index.hosts)

    def gpus(self, host: str | None = None) -> list[str]:
        if host is None:
            return [g for h in self.index.hosts for g in self.index.gpus[h]]
        return list(self.index.gpus.get(host, ()))

    def nics(self, host: str | None = None) -> list[str]:
        if host is None:
            return [n for h in self.index.hosts for n in self.index.nics[h]]
        return list(self.index.nics.get(host, ()))

    def switches(self, tier: str | None = None) -> list[str]:
        return [s for s in self.index.switches
                if tier is None or self.graph.nodes[s].get("tier") == tier]

    def __contains__(self, node: object) -> bool:
        return node in self.graph

    def kind(self, node: str) -> str:
        try:
            return self.graph.nodes[node]["kind"]
        except KeyError:
            raise TopologyError(f"node {node!r} is not in the topology") from None

    def host_of(self, node: str) -> str:
        kind = self.kind(node)
        if kind == "host":
            return node
        if kind == "switch":
            raise TopologyError(f"switch {node!r} belongs to no host")
        return self.graph.nodes[node]["host"]

    def nic_of_gpu(self, gpu: str) -> str | None:
        """The NIC linked to the GPU; without such a link (a topology that leaves PCIe out),
        the host's only NIC, or the NIC at the GPU's position among the host's GPUs (GPU i of
        G uses NIC i*N/G, the usual pairing of rail-optimized hosts)."""
        self.kind(gpu)
        nic = self.index.gpu_nic.get(gpu)
        if nic is not None:
            return nic
        host = self.graph.nodes[gpu].get("host")
        nics, gpus = self.index.nics.get(host, []), self.index.gpus.get(host, [])
        if len(nics) == 1:
            return nics[0]
        if nics and gpu in gpus and not any(g in self.index.gpu_nic for g in gpus):
            return nics[gpus.index(gpu) * len(nics) // len(gpus)]
        return None

    def rail(self, nic: str) -> int | None:
        self.kind(nic)
        rail = self.graph.nodes[nic].get("rail")
        return None if rail is None else int(rail)

    def default_placement(self, world_size: int) -> dict[int, tuple[str, str | None, str | None]]:
        """Rank -> (host, gpu, nic): ranks fill hosts in sorted order, GPUs in sorted order within
        a host; a host without GPUs takes one rank."""
        slots: list[tuple[str, str | None, str | None]] = []
        for h in self.index.hosts:
            gpus = self.index.gpus[h]
            slots.extend((h, g, self.index.gpu_nic.get(g)) for g in gpus)
            if not gpus:
                slots.append((h, None, self.index.nics[h][0] if self.index.nics[h] else None))
            if len(slots) >= world_size:
                break
        if world_size > len(slots):
            raise TopologyError(f"a job of {world_size} ranks does not fit: the topology has "
                                f"{len(slots)} GPU slots")
        return dict(enumerate(slots[:world_size]))

    # ----- links --------------------------------------------------------------------------
    def links(self) -> list[str]:
        """Physical links (gpu-nic, nic-switch, switch-switch); host membership is not a link."""
        return list(self.index.links)

    def has_link(self, link: str) -> bool:
        return link in self.index.links

    def endpoints(self, link: str) -> tuple[str, str]:
        try:
            return self.index.links[link]
        except KeyError:
            raise TopologyError(f"link {link!r} is not in the topology (a link id is two "
                                "node ids, sorted, joined by '~')") from None

    def capacity(self, link: str) -> float:
        u, v = self.endpoints(link)
        return float(self.graph.edges[u, v].get("gbps", float("inf")))

    def neighbors(self, node: str) -> list[str]:
        """The nodes linked to ``node``, host membership included."""
        self.kind(node)
        return list(self.graph.adj[node])

    def links_of(self, node: str) -> list[str]:
        """The physical links that end at ``node``."""
        self.kind(node)
        return [link_id(node, n) for n in self.graph.adj[node]
                if link_id(node, n) in self.index.links]

    # ----- paths --------------------------------------------------------------------------
    def paths(self, src_nic: str, dst_nic: str) -> list[list[str]]:
        """Candidate (ECMP) shortest paths from one NIC to another through switches, cached."""
        key = (src_nic, dst_nic)
        found = self._paths.get(key)
        if found is None:
            for nic in key:
                if self.kind(nic) != "nic":
                    raise TopologyError(f"{nic!r} is a {self.kind(nic)}, not a nic")
            found = None
            if self.index.two_tier:
                found = self._two_tier_paths(src_nic, dst_nic)
            elif self.index.tiered:
                found = self._tiered_paths(src_nic, dst_nic)
            if found is None:
                found = self._shortest_paths(src_nic, dst_nic, frozenset())
            self._paths[key] = found
        return found

    def paths_avoiding(self, src_nic: str, dst_nic: str,
                       down: Iterable[str]) -> list[list[str]]:
        """Paths that use no link in ``down``: the ECMP candidates that survive, or if none do,
        the shortest paths of the fabric without those links (as routing would reconverge)."""
        down = frozenset(down)
        if not down:
            return self.paths(src_nic, dst_nic)
        alive = [p for p in self.paths(src_nic, dst_nic)
                 if not any(lk in down for lk in self.path_links(p))]
        return alive or self._shortest_paths(src_nic, dst_nic, down)

    def path_links(self, path: list[str]) -> list[str]:
        return [link_id(a, b) for a, b in itertools.pairwise(path)]

    def _two_tier_paths(self, src: str, dst: str) -> list[list[str]] | None:
        ix = self.index
        up_s, up_d = ix.nic_up.get(src, ()), ix.nic_up.get(dst, ())
        shared = [leaf for leaf in up_s if leaf in up_d]
        if shared:
            return [[src, leaf, dst] for leaf in shared]
        out = [[src, ls, sp, ld, dst]
               for ls in up_s for ld in up_d for sp in ix.leaf_up[ls] if sp in ix.leaf_up_set[ld]]
        return out or None

    def _tiered_paths(self, src: str, dst: str) -> list[list[str]] | None:
        """Valley-free paths (up through the tiers, then down), as a tiered fabric routes:
        climb from both NICs a tier at a time and join at the lowest tier where they meet.
        On a fat tree these are exactly the shortest paths, found without a graph search
        (which takes tens of ms per pair at thousands of GPUs)."""
        ix = self.index
        ups: dict[str, list[list[str]]] = {leaf: [[src, leaf]] for leaf in ix.nic_up.get(src, ())}
        downs: dict[str, list[list[str]]] = {leaf: [[leaf, dst]]
                                             for leaf in ix.nic_up.get(dst, ())}
        for _ in TIERS:
            meet = [n for n in ups if n in downs]
            if meet:
                return sorted(a + b[1:] for n in meet for a in ups[n] for b in downs[n])
            ups = _climb(ix.up, ups, lambda p, n: [*p, n])
            downs = _climb(ix.up, downs, lambda p, n: [n, *p])
            if not ups or not downs:
                break
        return None

    def _shortest_paths(self, src: str, dst: str, down: frozenset[str]) -> list[list[str]]:
        graph = self.graph

        def node_ok(n: str) -> bool:
            return n in (src, dst) or graph.nodes[n].get("kind") == "switch"

        def edge_ok(a: str, b: str) -> bool:
            return link_id(a, b) not in down

        view = nx.subgraph_view(graph, filter_node=node_ok, filter_edge=edge_ok)
        try:
            return sorted(nx.all_shortest_paths(view, src, dst))
        except nx.NetworkXNoPath:
            return []


def _climb(up: dict[str, list[str]], partial: dict[str, list[list[str]]],
           extend: Callable[[list[str], str], list[str]]) -> dict[str, list[list[str]]]:
    """Partial paths that end at each node, carried one tier up."""
    out: dict[str, list[list[str]]] = {}
    for node, paths in partial.items():
        for nxt in up.get(node, ()):
            out.setdefault(nxt, []).extend(extend(p, nxt) for p in paths)
    return out


class _Index:
    """Lookups built once from the graph: nodes by kind, NIC uplinks, switch uplinks by tier,
    whether the fabric is a two-tier leaf/spine or tiered (leaf, spine, core: so paths can be
    computed from tiers instead of a graph search)."""

    def __init__(self, g: nx.Graph) -> None:
        kinds = {n: d.get("kind") for n, d in g.nodes(data=True)}
        self.hosts = sorted((n for n, k in kinds.items() if k == "host"), key=natural_key)
        self.switches = sorted((n for n, k in kinds.items() if k == "switch"), key=natural_key)
        self.gpus: dict[str, list[str]] = {h: [] for h in self.hosts}
        self.nics: dict[str, list[str]] = {h: [] for h in self.hosts}
        for n, k in kinds.items():
            if k in ("gpu", "nic"):
                (self.gpus if k == "gpu" else self.nics)[g.nodes[n]["host"]].append(n)
        for table in (self.gpus, self.nics):
            for lst in table.values():
                lst.sort(key=natural_key)
        self.links: dict[str, tuple[str, str]] = {}
        self.gpu_nic: dict[str, str] = {}
        self.nic_up: dict[str, list[str]] = {}
        self.leaf_up: dict[str, list[str]] = {}
        self.up: dict[str, list[str]] = {}
        tiers = {s: g.nodes[s].get("tier") for s in self.switches}
        rank = {t: i for i, t in enumerate(TIERS)}
        two_tier = tiered = bool(self.switches)
        for u, v in g.edges():
            ku, kv = kinds[u], kinds[v]
            if "host" in (ku, kv):
                continue
            self.links[link_id(u, v)] = (u, v)
            if {ku, kv} == {"gpu", "nic"}:
                gpu, nic = (u, v) if ku == "gpu" else (v, u)
                self.gpu_nic.setdefault(gpu, nic)
            elif {ku, kv} == {"nic", "switch"}:
                nic, sw = (u, v) if ku == "nic" else (v, u)
                self.nic_up.setdefault(nic, []).append(sw)
                two_tier &= tiers[sw] == "leaf"
                tiered &= tiers[sw] == "leaf"
            elif ku == kv == "switch":
                pair = {tiers[u], tiers[v]}
                two_tier &= pair == {"leaf", "spine"}
                if pair == {"leaf", "spine"}:
                    leaf, spine = (u, v) if tiers[u] == "leaf" else (v, u)
                    self.leaf_up.setdefault(leaf, []).append(spine)
                lo, hi = sorted((u, v), key=lambda n: rank.get(tiers[n], -9))
                # only links between adjacent tiers make every shortest path valley-free
                tiered &= (tiers[lo] in rank and tiers[hi] in rank
                           and rank[tiers[hi]] == rank[tiers[lo]] + 1)
                self.up.setdefault(lo, []).append(hi)
        for lst in (*self.nic_up.values(), *self.leaf_up.values(), *self.up.values()):
            lst.sort(key=natural_key)
        for s in self.switches:
            self.leaf_up.setdefault(s, [])
        self.leaf_up_set = {leaf: set(sp) for leaf, sp in self.leaf_up.items()}
        self.two_tier = two_tier
        self.tiered = tiered


# ----- parsing --------------------------------------------------------------------------
def _parse(obj: Any, source: str) -> nx.Graph:
    if not isinstance(obj, dict):
        raise FormatError("a topology is a JSON object with 'nodes' and 'links'", source=source)
    nodes, links = obj.get("nodes"), obj.get("links", obj.get("edges"))
    if not isinstance(nodes, list):
        raise FormatError("missing list of nodes", source=source, field="nodes")
    if not isinstance(links, list):
        raise FormatError("missing list of links", source=source, field="links")
    graph = obj.get("graph") or {}
    if not isinstance(graph, dict) or not all(isinstance(k, str) for k in graph):
        raise FormatError("graph attributes must be an object", source=source, field="graph")
    g = nx.Graph(**graph)
    for i, node in enumerate(nodes):
        where = f"nodes[{i}]"
        if not isinstance(node, dict):
            raise FormatError("a node is an object", source=source, field=where)
        nid = node.get("id")
        if not isinstance(nid, str) or not nid:
            raise FormatError("node has no string 'id'", source=source, field=f"{where}.id")
        if "~" in nid:
            raise FormatError(f"node id {nid!r} contains '~', which separates link ids",
                              source=source, field=f"{where}.id")
        if nid in g:
            raise FormatError(f"node {nid!r} appears twice", source=source, field=f"{where}.id")
        kind = node.get("kind")
        if kind not in KINDS:
            raise FormatError(f"node {nid!r} has kind {kind!r}; expected one of {KINDS}",
                              source=source, field=f"{where}.kind")
        tier = node.get("tier")
        if tier is not None and tier not in TIERS:
            raise FormatError(f"switch {nid!r} has tier {tier!r}; expected one of {TIERS}",
                              source=source, field=f"{where}.tier")
        rail = node.get("rail")
        if rail is not None and (isinstance(rail, bool) or not isinstance(rail, int)):
            raise FormatError(f"nic {nid!r} has rail {rail!r}; expected an integer",
                              source=source, field=f"{where}.rail")
        g.add_node(nid, **{k: v for k, v in node.items() if k != "id"})
    for i, node in enumerate(nodes):
        if node["kind"] in ("gpu", "nic"):
            host = node.get("host")
            if host not in g or g.nodes[host]["kind"] != "host":
                raise FormatError(f"{node['kind']} {node['id']!r} names host {host!r}, which is "
                                  "not a host node", source=source, field=f"nodes[{i}].host")
    for i, link in enumerate(links):
        where = f"links[{i}]"
        if not isinstance(link, dict):
            raise FormatError("a link is an object", source=source, field=where)
        ends: list[str] = []
        for end in ("source", "target"):
            n = link.get(end)
            # node ids are checked to be strings above, so a non-string end is unknown too
            if not isinstance(n, str) or n not in g:
                raise FormatError(f"link names unknown node {n!r}", source=source,
                                  field=f"{where}.{end}")
            ends.append(n)
        u, v = ends
        gbps = link.get("gbps")
        if gbps is not None and (isinstance(gbps, bool) or not isinstance(gbps, (int, float))
                                 or not gbps > 0):
            raise FormatError(f"link {link_id(u, v)!r} has gbps {gbps!r}; expected a positive "
                              "number", source=source, field=f"{where}.gbps")
        kinds = {g.nodes[u]["kind"], g.nodes[v]["kind"]}
        if "host" in kinds and kinds not in ({"host", "gpu"}, {"host", "nic"}):
            raise FormatError(f"link {link_id(u, v)!r} joins a host to a "
                              f"{(kinds - {'host'}).pop() if len(kinds) > 1 else 'host'}; hosts "
                              "link only to their gpus and nics", source=source, field=where)
        g.add_edge(u, v, **{k: val for k, val in link.items() if k not in ("source", "target")})
    return g
