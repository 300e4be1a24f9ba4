"""Merge a topology fragment into an existing topology: sources that describe different layers
(the fabric from ``ibnetdiscover``, LLDP or Slurm; each host's GPUs and NICs from its own tools)
or different parts of one cluster become one graph.

Names are mapped, not just compared:

- hosts by id, else by short name, case aside (``node01`` = ``Node01.cluster``) when that is
  unique;
- a host's NICs by id, RDMA device (``mlx5_0``), network interface (``ibp24s0``) or GUID; a NIC
  found by GUID on a host named after that GUID (an HCA with a default node description, see
  :mod:`~c4.topology.importers.ibnetdiscover`) moves to the host the fragment names, and
  a NIC named after its interface is renamed after its RDMA device once that is known;
- switches by id or GUID;
- a placeholder NIC (a host whose source named only its switch) gives way to the host's real
  NICs: those that a GPU uses, else those not down, are cabled to its switch.

Disagreements (a GPU paired with two NICs, two capacities for one link, a GUID on two hosts,
one id of two kinds) keep the existing topology's value and are reported; names that match
nothing are added and reported. Nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from c4.topology.importers.common import INFO, WARNING, Issue, few

_COMPARED = ("tier", "guid", "ibdev", "netdev", "rail")


@dataclass
class MergeResult:
    graph: nx.Graph
    issues: list[Issue] = field(default_factory=list)


def merge(base: nx.Graph, incoming: nx.Graph, source: str = "") -> MergeResult:
    """``incoming`` merged into a copy of ``base``; the issues say what was mapped, what
    disagreed and what matched nothing."""
    m = _Merger(base.copy(), incoming, source)
    m.run()
    return MergeResult(m.g, m.issues)


class _Merger:
    def __init__(self, g: nx.Graph, inc: nx.Graph, source: str) -> None:
        self.g, self.inc, self.source = g, inc, source
        self.map: dict[str, str] = {}
        self.issues: list[Issue] = []
        self.had_hosts = any(d.get("kind") == "host" for _, d in g.nodes(data=True))

    def warn(self, msg: str) -> None:
        self.issues.append(Issue(WARNING, msg, self.source))

    def info(self, msg: str) -> None:
        self.issues.append(Issue(INFO, msg, self.source))

    def kind(self, graph: nx.Graph, n: str) -> str:
        return graph.nodes[n].get("kind", "")

    # ----- the steps ----------------------------------------------------------------------
    def run(self) -> None:
        self._hosts()
        self._nics()
        self._gpus_and_switches()
        self._attributes()
        self._edges()
        self._placeholders()
        self._fill_capacity()
        self._graph_attributes()

    def _hosts(self) -> None:
        base = {n for n, d in self.g.nodes(data=True) if d.get("kind") == "host"}
        short: dict[str, list[str]] = {}
        for h in base:
            short.setdefault(h.split(".")[0].lower(), []).append(h)
        new: list[str] = []
        for h, d in self.inc.nodes(data=True):
            if d.get("kind") != "host":
                continue
            if h in base:
                self.map[h] = h
                continue
            same = short.get(h.split(".")[0].lower(), [])
            if len(same) == 1:
                self.map[h] = same[0]
                self.info(f"host {h!r} taken for {same[0]!r} (same short name, case aside)")
                continue
            if h in self.g:
                self.warn(f"{h!r} is a host here and a {self.kind(self.g, h)} in the existing "
                          f"topology: added as host {h}@host")
                self.map[h] = f"{h}@host"
            else:
                self.map[h] = h
            new.append(h)
        if new and self.had_hosts:
            self.warn(f"{len(new)} host(s) are not in the existing topology: "
                      f"{few(new)} (added)")

    def _nics(self) -> None:
        g = self.g
        by_alias: dict[tuple[str, str, str], str] = {}
        by_guid: dict[str, str] = {}
        real: dict[str, list[str]] = {}
        for n, d in g.nodes(data=True):
            if d.get("kind") != "nic":
                continue
            host = d["host"]
            if not d.get("placeholder"):
                real.setdefault(host, []).append(n)
            by_alias[(host, "name", n[len(host) + 1:])] = n
            for key in ("ibdev", "netdev"):
                if d.get(key):
                    by_alias[(host, key, d[key])] = n
            for key in ("guid", "port_guid"):
                if d.get(key):
                    by_guid[d[key]] = n
        unmatched: dict[str, list[str]] = {}
        for nic, d in self.inc.nodes(data=True):
            if d.get("kind") != "nic":
                continue
            host = self.map[d["host"]]
            name = nic[len(d["host"]) + 1:]
            found = by_alias.get((host, "name", name))
            for key in ("ibdev", "netdev"):
                if found is None and d.get(key):
                    found = (by_alias.get((host, key, d[key]))
                             or (by_alias.get((host, "name", d[key])) if key == "ibdev"
                                 else None))
            for key in ("guid", "port_guid"):
                if found is None and d.get(key) and d[key] in by_guid:
                    found = self._by_guid(by_guid[d[key]], host, name, d[key])
            if found is None:
                self.map[nic] = f"{host}/{name}"
                if host in real and not d.get("placeholder"):
                    unmatched.setdefault(host, []).append(name)
                continue
            self.map[nic] = self._canonical(found, d)
        for host, names in sorted(unmatched.items()):
            theirs = [n[len(host) + 1:] for n in real[host]]
            self.warn(f"host {host}: NIC(s) {few(names)} match none of its NICs in the existing "
                      f"topology ({few(theirs)}) by name, RDMA device, interface or GUID: added "
                      "without the existing NICs' switch links (give the hosts' GUIDs, e.g. "
                      "with c4 topology discover, or node descriptions with device names)")

    def _by_guid(self, found: str, host: str, name: str, guid: str) -> str | None:
        """A NIC found by GUID: the same host's, or one to move off a GUID-named host."""
        old_host = self.g.nodes[found]["host"]
        if old_host == host:
            return found
        own = [n for n in self.g.adj[old_host] if self.kind(self.g, n) in ("nic", "gpu")]
        if old_host.startswith("H-") and own == [found]:
            new = f"{host}/{name}"
            if host not in self.g:
                self.g.add_node(host, kind="host")
            self._relabel(found, new)
            self.g.nodes[new]["host"] = host
            self.g.remove_node(old_host)
            self.g.add_edge(host, new)
            self.info(f"HCA {old_host} (GUID {guid}) is {new}")
            return new
        self.warn(f"GUID {guid} is NIC {found} in the existing topology and {host}/{name} here: "
                  "not joined (two hosts claim one adapter)")
        return None

    def _canonical(self, found: str, d: dict[str, Any]) -> str:
        """The matched NIC, renamed after its RDMA device if it was named otherwise."""
        host = self.g.nodes[found]["host"]
        ibdev = d.get("ibdev")
        target = f"{host}/{ibdev}" if ibdev else found
        if ibdev and target != found and target not in self.g \
                and not self.g.nodes[found].get("ibdev"):
            self._relabel(found, target)
            return target
        return found

    def _relabel(self, old: str, new: str) -> None:
        nx.relabel_nodes(self.g, {old: new}, copy=False)
        for nbr in self.g.adj[new]:
            ports = self.g.edges[new, nbr].get("ports")
            if ports and old in ports:
                ports[new] = ports.pop(old)
        for k, v in self.map.items():
            if v == old:
                self.map[k] = new

    def _gpus_and_switches(self) -> None:
        by_guid = {d["guid"]: n for n, d in self.g.nodes(data=True)
                   if d.get("kind") == "switch" and d.get("guid")}
        for n, d in self.inc.nodes(data=True):
            kind = d.get("kind")
            if kind == "gpu":
                host = d["host"]
                self.map[n] = f"{self.map[host]}/{n[len(host) + 1:]}"
            elif kind == "switch":
                target = n if n in self.g else by_guid.get(d.get("guid", ""), n)
                if target in self.g and self.kind(self.g, target) != "switch":
                    self.warn(f"{n!r} is a switch here and a {self.kind(self.g, target)} in the "
                              f"existing topology: added as switch {n}@switch")
                    target = f"{n}@switch"
                self.map[n] = target

    def _attributes(self) -> None:
        for n, d in self.inc.nodes(data=True):
            target = self.map[n]
            if target not in self.g:
                attrs = dict(d)
                if "host" in attrs:
                    attrs["host"] = self.map[attrs["host"]]
                self.g.add_node(target, **attrs)
                continue
            mine = self.g.nodes[target]
            for k, v in d.items():
                if k == "host":
                    continue
                if k not in mine:
                    mine[k] = v
                elif k in _COMPARED and mine[k] != v:
                    self.warn(f"{target}: {k} is {mine[k]!r} in the existing topology and {v!r} "
                              "here: kept the existing")
            if mine.get("placeholder") and not d.get("placeholder"):
                mine.pop("placeholder")

    def _edges(self) -> None:
        g = self.g
        for u, v, d in self.inc.edges(data=True):
            a, b = self.map[u], self.map[v]
            kinds = {self.kind(g, a), self.kind(g, b)}
            if kinds == {"gpu", "nic"}:
                gpu, nic = (a, b) if self.kind(g, a) == "gpu" else (b, a)
                other = [n for n in g.adj[gpu] if self.kind(g, n) == "nic" and n != nic]
                if other:
                    self.warn(f"{gpu} uses NIC {other[0]} in the existing topology and {nic} "
                              "here: kept the existing")
                    continue
            if "ports" in d:
                d = {**d, "ports": {self.map.get(k, k): p for k, p in d["ports"].items()}}
            if not g.has_edge(a, b):
                g.add_edge(a, b, **d)
                continue
            mine = g.edges[a, b]
            for k in ("gbps", "cables"):
                if k in d and k in mine and d[k] != mine[k]:
                    self.warn(f"link {min(a, b)}~{max(a, b)}: {k} {mine[k]:g} in the existing "
                              f"topology, {d[k]:g} here: kept the existing")
            for k, val in d.items():
                mine.setdefault(k, val)

    def _placeholders(self) -> None:
        g = self.g
        for ph, d in list(g.nodes(data=True)):
            if not d.get("placeholder") or d.get("kind") != "nic":
                continue
            host = d["host"]
            real = [n for n in g.adj[host] if self.kind(g, n) == "nic" and n != ph]
            if not real:
                continue
            switches = [s for s in g.adj[ph] if self.kind(g, s) == "switch"]
            linked = [n for n in real if any(self.kind(g, s) == "switch" for s in g.adj[n])]
            used = [n for n in real if any(self.kind(g, x) == "gpu" for x in g.adj[n])]
            take = [n for n in (used or real)
                    if n not in linked and g.nodes[n].get("state") != "down"]
            if take and switches:
                for n in take:
                    for s in switches:
                        g.add_edge(n, s, **{k: v for k, v in g.edges[ph, s].items()
                                            if k != "ports"})
                self.info(f"host {host}: its source named only its switch ({few(switches)}); "
                          f"NIC(s) {few([n[len(host) + 1:] for n in take])} are cabled to it")
            on = sorted({s for n in linked for s in g.adj[n] if self.kind(g, s) == "switch"})
            if on and switches and not set(on) & set(switches):
                self.warn(f"host {host} is under {few(switches)} in one source, its NICs on "
                          f"{few(on)} in the other: kept the NICs' links")
            g.remove_node(ph)

    def _fill_capacity(self) -> None:
        g = self.g
        filled = 0
        for u, v, d in g.edges(data=True):
            if "gbps" in d:
                continue
            kinds = (self.kind(g, u), self.kind(g, v))
            if set(kinds) == {"nic", "switch"}:
                nic = u if kinds[0] == "nic" else v
                rate = g.nodes[nic].get("gbps")
                if rate:
                    d["gbps"] = rate * d.get("cables", 1)
                    filled += 1
        if filled:
            self.info(f"{filled} NIC cable(s) take their capacity from the NIC's port rate")

    def _graph_attributes(self) -> None:
        for k, v in self.inc.graph.items():
            if k == "sources":
                self.g.graph["sources"] = [*self.g.graph.get("sources", []), *v]
            elif k != "import_issues":
                self.g.graph.setdefault(k, v)
