"""What c4 can and cannot localize on a topology (``c4 topology check``).

c4 names a link or a switch from the transfers that cross it: a component is found when the
set of transfers it slows is its own. So a component is out of reach when no transfer crosses
it, and two components are one to c4 when exactly the same transfers cross both: the cables of
a bundle (a leaf with two cables to one spine is one link of the topology), a NIC and its only
cable, the two links of a switch that joins just two others. The exact test compares, for every
pair of leaves, the equal-cost paths between them (each path is a transfer that may take it):
links and switches on exactly the same paths cannot be told apart by any traffic.

Besides the fabric, placement needs the hosts' insides: ranks sit on GPUs, and a GPU's traffic
leaves through its NIC. Hosts without GPUs, without NICs, or whose GPUs are not paired with
NICs (c4 then assumes GPU i uses NIC i*N/G) are reported too, and so are parts of the fabric
that no path joins.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from c4.topology.importers.common import counts, few
from c4.topology.model import Topology, natural_key

LIMIT, GAP, NOTE = "limit", "gap", "note"
_ORDER = {LIMIT: 0, GAP: 1, NOTE: 2}


@dataclass
class Finding:
    """One thing c4 cannot do on this topology (``limit``), information it lacks (``gap``), or
    an assumption worth knowing (``note``)."""

    code: str
    severity: str
    summary: str
    items: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "summary": self.summary,
                "count": len(self.items), "items": self.items}


@dataclass
class CheckResult:
    counts: dict[str, Any]
    localizable: dict[str, Any]
    findings: list[Finding]

    def to_json(self) -> dict[str, Any]:
        return {"counts": self.counts, "localizable": self.localizable,
                "findings": [f.to_json() for f in self.findings]}

    def to_text(self) -> str:
        c = self.counts
        lines = [f"{c['hosts']} hosts, {c['gpus']} GPUs, {c['nics']} NICs, {c['switches']} "
                 f"switches, {c['links']} links ({c['cables']} cables)"]
        loc = self.localizable
        if loc.get("analysed"):
            lines.append(
                f"c4 can single out {loc['links_distinct']} of {loc['switch_links']} "
                f"switch-to-switch links and {loc['switches_distinct']} of "
                f"{loc['switches']} switches (paths between {loc['leaves']} leaves compared)")
        else:
            lines.append(f"paths not compared: {loc.get('reason', '')}")
        for f in self.findings:
            lines.append(f"{f.severity}: {f.summary}")
            if f.items and f.code not in ("nic_cable",):
                shown = [_item_text(i) for i in f.items[:5]]
                lines.extend(f"    {s}" for s in shown)
                if len(f.items) > 5:
                    lines.append(f"    … {len(f.items) - 5} more")
        return "\n".join(lines)


def _item_text(item: Any) -> str:
    if isinstance(item, list):
        return " = ".join(map(str, item))
    if isinstance(item, dict):
        return ", ".join(f"{k} {v}" for k, v in item.items())
    return str(item)


def check_topology(topo: Topology, max_leaves: int = 400) -> CheckResult:
    g = topo.graph
    findings: list[Finding] = []
    findings += _hosts(topo)
    findings += _nics(topo)
    findings += _links(topo)
    parts = _parts(topo)
    findings += parts
    loc, more = _flows(topo, max_leaves)
    findings += [f for f in more if not (parts and f.code == "unrouted")]
    findings.sort(key=lambda f: _ORDER[f.severity])
    return CheckResult(counts(g), loc, findings)


# ----- hosts and NICs ---------------------------------------------------------------------
def _hosts(topo: Topology) -> list[Finding]:
    g, ix = topo.graph, topo.index
    out: list[Finding] = []
    no_nic = [h for h in ix.hosts if not ix.nics[h]]
    if no_nic:
        out.append(Finding("host_no_nic", LIMIT, f"{len(no_nic)} host(s) have no NIC: c4 sees "
                           "no network traffic from them and can name only their GPUs or "
                           "the host", no_nic))
    placeholder = [h for h in ix.hosts if any(g.nodes[n].get("placeholder")
                                              for n in ix.nics[h])]
    if placeholder:
        out.append(Finding("host_nic_unknown", GAP, f"{len(placeholder)} host(s) are known by "
                           "their switch only (a placeholder NIC): a NIC or cable fault is "
                           "named as the host's attachment. Merge the hosts' discovery (c4 "
                           "topology import host ...)", placeholder))
    no_gpu = [h for h in ix.hosts if not ix.gpus[h]]
    if no_gpu:
        out.append(Finding("host_no_gpu", GAP, f"{len(no_gpu)} host(s) have no GPU: ranks on "
                           "them are placed by host only (merge nvidia-smi topo -m, or give "
                           "c4 sim --gpus-per-host)", no_gpu))
    unpaired = [h for h in ix.hosts if ix.gpus[h] and len(ix.nics[h]) > 1
                and any(gpu not in ix.gpu_nic for gpu in ix.gpus[h])]
    if unpaired:
        out.append(Finding("host_no_pairing", GAP, f"{len(unpaired)} host(s) have GPUs and "
                           "several NICs but no GPU-NIC pairing: c4 assumes GPU i uses NIC "
                           "i*N/G, which may blame the wrong NIC (merge nvidia-smi topo -m)",
                           unpaired))
    far = sorted({g.edges[u, v].get("pcie") for u, v in g.edges()
                  if g.edges[u, v].get("pcie") in ("PHB", "NODE", "SYS")})
    if far:
        n = sum(1 for u, v in g.edges() if g.edges[u, v].get("pcie") in far)
        out.append(Finding("gpu_far_nic", NOTE, f"{n} GPU(s) reach their NIC only through a "
                           f"host bridge ({', '.join(far)}): GPUDirect RDMA is slow there, and "
                           "a slow GPU-NIC path looks like a slow NIC"))
    return out


def _nics(topo: Topology) -> list[Finding]:
    g, ix = topo.graph, topo.index
    out: list[Finding] = []
    loose = [n for h in ix.hosts for n in ix.nics[h] if n not in ix.nic_up]
    if loose:
        down = [n for n in loose if g.nodes[n].get("state") == "down"]
        out.append(Finding("nic_unlinked", LIMIT if len(down) < len(loose) else NOTE,
                           f"{len(loose)} NIC(s) are cabled to no switch"
                           f"{f' ({len(down)} of them down)' if down else ''}: no path "
                           "leaves them, so traffic on them cannot be placed", loose))
    single = [n for n, ups in ix.nic_up.items() if len(ups) == 1
              and g.edges[n, ups[0]].get("cables", 1) == 1]
    if single:
        out.append(Finding("nic_cable", NOTE, f"{len(single)} NIC(s) have one cable: a NIC and "
                           "its only cable carry the same transfers, so c4 names both", single))
    return out


# ----- links ------------------------------------------------------------------------------
def _links(topo: Topology) -> list[Finding]:
    g = topo.graph
    out: list[Finding] = []
    bundles = [{"link": lk, "cables": int(g.edges[topo.endpoints(lk)]["cables"])}
               for lk in sorted(topo.links(), key=natural_key)
               if g.edges[topo.endpoints(lk)].get("cables", 1) > 1]
    if bundles:
        out.append(Finding("bundle", LIMIT, f"{len(bundles)} link(s) are bundles of several "
                           "cables: no path names a cable, so c4 names the bundle (a cable "
                           "fault halves or thins the bundle, it does not cut it)", bundles))
    thin = _thin_bundles(topo)
    if thin:
        out.append(thin)
    nocap = [lk for lk in topo.links() if "gbps" not in g.edges[topo.endpoints(lk)]]
    if nocap:
        out.append(Finding("no_capacity", GAP, f"{len(nocap)} link(s) have no capacity "
                           "(gbps): c4 takes them as never the bottleneck", sorted(nocap)))
    untiered = [s for s in topo.switches() if g.nodes[s].get("tier") is None]
    if untiered:
        out.append(Finding("no_tier", NOTE, f"{len(untiered)} switch(es) have no tier: paths "
                           "are found by graph search (slower at scale)", untiered))
    return out


def _thin_bundles(topo: Topology) -> Finding | None:
    """Switch-to-switch links with fewer cables than most links between the same tiers."""
    g = topo.graph
    by_pair: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for lk in topo.links():
        u, v = topo.endpoints(lk)
        if g.nodes[u].get("kind") == g.nodes[v].get("kind") == "switch":
            pair = "~".join(sorted((str(g.nodes[u].get("tier")), str(g.nodes[v].get("tier")))))
            by_pair[pair].append((lk, int(g.edges[u, v].get("cables", 1))))
    thin: list[str] = []
    words = []
    for pair, links in by_pair.items():
        common, n = Counter(c for _, c in links).most_common(1)[0]
        few_ = [lk for lk, c in links if c < common]
        if few_ and n > len(links) / 2:
            thin += few_
            words.append(f"{len(few_)} {pair} link(s) have fewer cables than the "
                         f"{common} of {n} others")
    if not thin:
        return None
    return Finding("thin_bundle", GAP, "; ".join(words) + ": a missing or down cable? Their "
                   "capacity is lower, and c4 would see them as slower, not as faulty",
                   sorted(thin, key=natural_key))


def _parts(topo: Topology) -> list[Finding]:
    """Parts of the fabric (NICs and switches) with no path between them."""
    g = topo.graph
    nodes = [n for n, d in g.nodes(data=True) if d.get("kind") in ("nic", "switch")]
    sub = g.subgraph(nodes)
    parts = [c for c in nx.connected_components(sub) if any(
        g.nodes[n]["kind"] == "nic" for n in c) and any(g.nodes[n]["kind"] == "switch" for n in c)]
    if len(parts) < 2:
        return []
    desc = []
    for c in sorted(parts, key=len, reverse=True):
        hosts = {g.nodes[n]["host"] for n in c if g.nodes[n]["kind"] == "nic"}
        sw = sorted((n for n in c if g.nodes[n]["kind"] == "switch"), key=natural_key)
        desc.append(f"{len(hosts)} host(s), {len(sw)} switch(es) ({few(sw, 2)})")
    return [Finding("disconnected", LIMIT, f"the fabric falls into {len(parts)} parts that no "
                    "path joins: a job spanning them cannot be routed, and c4 cannot follow "
                    "traffic between them", desc)]


# ----- flows ------------------------------------------------------------------------------
def _flows(topo: Topology, max_leaves: int) -> tuple[dict[str, Any], list[Finding]]:
    """Which switch-to-switch links and switches the transfers between leaves tell apart."""
    g, ix = topo.graph, topo.index
    uplinks = [lk for lk in topo.links()
               if all(g.nodes[n].get("kind") == "switch" for n in topo.endpoints(lk))]
    reps: dict[str, str] = {}
    for nic, ups in sorted(ix.nic_up.items()):
        if len(ups) == 1:
            reps.setdefault(ups[0], nic)
    leaves = sorted(reps, key=natural_key)
    base = {"switch_links": len(uplinks), "switches": len(ix.switches), "leaves": len(leaves)}
    if len(leaves) > max_leaves:
        return {**base, "analysed": False, "reason": f"{len(leaves)} leaves > --max-leaves "
                f"{max_leaves}"}, []
    link_sig: dict[str, set[int]] = {lk: set() for lk in uplinks}
    node_sig: dict[str, set[int]] = {s: set() for s in ix.switches}
    pid = 0
    for leaf in leaves:                 # transfers that turn at the leaf
        hosts = {g.nodes[n]["host"] for n in g.adj[leaf] if g.nodes[n].get("kind") == "nic"}
        if len(hosts) > 1:
            node_sig[leaf].add(pid)
            pid += 1
    unrouted = 0
    for i, a in enumerate(leaves):
        for b in leaves[i + 1:]:
            paths = topo.paths(reps[a], reps[b])
            if not paths:
                unrouted += 1
            for p in paths:
                for s in p[1:-1]:
                    node_sig[s].add(pid)
                for lk in topo.path_links(p[1:-1]):
                    link_sig[lk].add(pid)
                pid += 1
    findings: list[Finding] = []
    unused = sorted((lk for lk, s in link_sig.items() if not s), key=natural_key)
    if unused:
        findings.append(Finding("link_unused", LIMIT, f"{len(unused)} switch-to-switch link(s) "
                                "lie on no shortest path between leaves: no transfer crosses "
                                "them, so c4 cannot see a fault there (nor does traffic suffer "
                                "from one, until routing changes)", unused))
    idle = sorted((s for s, sig in node_sig.items() if not sig), key=natural_key)
    if idle:
        findings.append(Finding("switch_unused", LIMIT, f"{len(idle)} switch(es) lie on no "
                                "path between hosts: c4 cannot see a fault there", idle))
    groups: dict[frozenset[int], list[str]] = defaultdict(list)
    for lk, sig in link_sig.items():
        if sig:
            groups[frozenset(sig)].append(lk)
    for s, sig in node_sig.items():
        if sig:
            groups[frozenset(sig)].append(s)
    twins = sorted((sorted(v, key=natural_key) for v in groups.values() if len(v) > 1),
                   key=lambda v: natural_key(v[0]))
    if twins:
        findings.append(Finding("indistinguishable", LIMIT, f"{len(twins)} group(s) of links "
                                "and switches carry exactly the same transfers: c4 names each "
                                "group, never one member (e.g. a spine with two links, or a "
                                "leaf's only uplink)", twins))
    if unrouted:
        findings.append(Finding("unrouted", LIMIT, f"{unrouted} pair(s) of leaves have no path "
                                "between them"))
    alone = {m for grp in twins for m in grp}
    loc = {**base, "analysed": True,
           "links_distinct": sum(1 for lk in uplinks if link_sig[lk] and lk not in alone),
           "switches_distinct": sum(1 for s in ix.switches if node_sig[s] and s not in alone),
           "paths": pid}
    return loc, findings
