"""An imported topology (``c4 topology import``) made ready for the simulator.

The simulator places ranks on GPUs host by host, TP groups inside a host, and sends each
rank's traffic through its GPU's NIC along the topology's paths. So it needs hosts of exactly
``gpus_per_host`` GPUs, each GPU linked to a NIC that is cabled to a switch, all in one
connected part of the fabric, and capacities on the links. :func:`fit` takes what it needs:

- a host without GPUs (a fabric-only import) gets ``gpus_per_host`` of them, GPU i on its
  cabled NIC i*N/G (NICs in natural order), as c4's own fabrics pair them;
- a host whose GPUs have no NIC links gets the same pairing; hosts whose GPU count differs
  from ``gpus_per_host``, or that reach no switch, are left out;
- the hosts kept are those in the largest connected part, the most common host shape (NIC
  count) first, then in natural order; the others are dropped from the simulated topology;
- links without capacity get one: a NIC cable ``nic_gbps``, a switch-to-switch link
  ``uplink_gbps`` or, without it, the non-blocking share of the NICs below it.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import networkx as nx

from c4.errors import C4Error
from c4.topology import Topology
from c4.topology.model import natural_key
from diagnosis.sim.config import SimError

log = logging.getLogger(__name__)


def load_fitted(path: str | Path, gpus: int, gpus_per_host: int, nic_gbps: float,
                uplink_gbps: float | None) -> Topology:
    try:
        topo = Topology.load(path)
    except C4Error as exc:
        raise SimError(f"--topology: {exc}") from None
    fitted, notes = fit(topo, gpus, gpus_per_host, nic_gbps, uplink_gbps)
    for note in notes:
        log.info("--topology %s: %s", path, note)
    return fitted


def fit(topo: Topology, gpus: int, gpus_per_host: int, nic_gbps: float = 400.0,
        uplink_gbps: float | None = None) -> tuple[Topology, list[str]]:
    """The part of ``topo`` a job of ``gpus`` GPUs runs on, GPUs added where missing; and
    notes saying what was added, assumed and left out."""
    g = topo.graph.copy()
    kind = {n: d.get("kind") for n, d in g.nodes(data=True)}
    notes: list[str] = []
    cabled = {h: sorted((n for n in g.adj[h] if kind[n] == "nic"
                         and any(kind[s] == "switch" for s in g.adj[n])), key=natural_key)
              for h, k in kind.items() if k == "host"}
    added = paired = 0
    for host, nics in cabled.items():
        host_gpus = sorted((n for n in g.adj[host] if kind[n] == "gpu"), key=natural_key)
        had_gpus = bool(host_gpus)
        if not nics:
            continue
        if not had_gpus:
            host_gpus = [f"{host}/gpu{i}" for i in range(gpus_per_host)]
            g.add_nodes_from((gpu, {"kind": "gpu", "host": host}) for gpu in host_gpus)
            g.add_edges_from((host, gpu) for gpu in host_gpus)
            added += 1
        if any(kind.get(n) == "nic" for gpu in host_gpus for n in g.adj[gpu]):
            continue
        for i, gpu in enumerate(host_gpus):
            nic = nics[i * len(nics) // len(host_gpus)]
            g.add_edge(gpu, nic, **_cable_gbps(g, nic))
        paired += had_gpus
    kind = {n: d.get("kind") for n, d in g.nodes(data=True)}
    if added:
        notes.append(f"{added} host(s) without GPUs got {gpus_per_host} each, GPU i on NIC "
                     "i*N/G of their cabled NICs")
    if paired:
        notes.append(f"{paired} host(s) had GPUs without NIC links: paired GPU i with NIC i*N/G")
    ok = [h for h, nics in cabled.items() if _fits(g, kind, h, gpus_per_host)]
    part = _largest_part(g, kind, ok)
    need = gpus // gpus_per_host
    if len(part) < need:
        raise SimError(f"--topology: a job of {gpus} GPUs needs {need} hosts of "
                       f"{gpus_per_host} GPUs, each GPU on a NIC cabled to the fabric, in one "
                       f"connected part; this topology has {len(part)} (of {len(cabled)} "
                       "hosts). Lower --gpus, or change --gpus-per-host")
    shapes = Counter(len(cabled[h]) for h in part)
    keep = sorted(part, key=lambda h: (-shapes[len(cabled[h])], natural_key(h)))[:need]
    kept = Counter(len(cabled[h]) for h in keep)
    if len(kept) > 1:
        notes.append("hosts of several shapes kept (" + ", ".join(
            f"{n} with {k} NIC(s)" for k, n in kept.most_common()) + "): GPUs that share "
            "fewer NICs are slower on the network, as they would be in the cluster")
    notes += _capacities(g, nic_gbps, uplink_gbps)      # of the whole fabric, not the job's part
    drop = [h for h in cabled if h not in set(keep)]
    if drop:
        members = [n for h in drop for n in (h, *g.adj[h]) if kind.get(n) != "switch"]
        g.remove_nodes_from(members)
        notes.append(f"{len(keep)} host(s) kept, {len(drop)} left out (most common shape: "
                     f"{shapes.most_common(1)[0][0]} cabled NICs)")
    return Topology(g), notes


def _cable_gbps(g: nx.Graph, nic: str) -> dict[str, float]:
    rates = [d["gbps"] for _, s, d in g.edges(nic, data=True)
             if g.nodes[s].get("kind") == "switch" and "gbps" in d]
    return {"gbps": max(rates)} if rates else {}


def _fits(g: nx.Graph, kind: dict[str, str | None], host: str, gpus_per_host: int) -> bool:
    host_gpus = [n for n in g.adj[host] if kind[n] == "gpu"]
    return len(host_gpus) == gpus_per_host and all(
        any(kind[n] == "nic" and any(kind[s] == "switch" for s in g.adj[n]) for n in g.adj[gpu])
        for gpu in host_gpus)


def _largest_part(g: nx.Graph, kind: dict[str, str | None], hosts: list[str]) -> list[str]:
    """The hosts of ``hosts`` in the connected part of the fabric that holds most of them."""
    fabric = g.subgraph(n for n, k in kind.items() if k in ("nic", "switch"))
    part_of: dict[str, int] = {}
    for i, comp in enumerate(nx.connected_components(fabric)):
        for n in comp:
            part_of[n] = i
    by_part: dict[int, list[str]] = {}
    for h in hosts:
        nics = [n for n in g.adj[h] if kind[n] == "nic" and n in part_of]
        if nics and len({part_of[n] for n in nics}) == 1:
            by_part.setdefault(part_of[nics[0]], []).append(h)
    return max(by_part.values(), key=len, default=[])


def _capacities(g: nx.Graph, nic_gbps: float, uplink_gbps: float | None) -> list[str]:
    """Give links without ``gbps`` one; say how many."""
    kind = {n: d.get("kind") for n, d in g.nodes(data=True)}
    level = {n: d.get("level", 0) for n, d in g.nodes(data=True) if kind[n] == "switch"}
    cables = nics = 0
    below: dict[str, float] = Counter()
    up: dict[str, list[str]] = {}
    for u, v, d in g.edges(data=True):
        ku, kv = kind[u], kind[v]
        if {ku, kv} == {"nic", "switch"}:
            sw = u if ku == "switch" else v
            below[sw] += 1
            if "gbps" not in d:
                d["gbps"] = nic_gbps * d.get("cables", 1)
                cables += 1
        elif ku == kv == "switch" and level[u] != level[v]:
            lo, hi = (u, v) if level[u] < level[v] else (v, u)
            up.setdefault(lo, []).append(hi)
    for s in sorted(level, key=level.get):          # NICs below, shared among the uplinks
        for hi in up.get(s, []):
            below[hi] += below[s] / len(up[s])
    for u, v, d in g.edges(data=True):
        if kind[u] == kind[v] == "switch" and "gbps" not in d:
            lo = u if level[u] <= level[v] else v
            d["gbps"] = uplink_gbps or max(nic_gbps, below[lo] * nic_gbps / len(up.get(lo, [v])))
            nics += 1
    notes = []
    if cables:
        notes.append(f"{cables} NIC cable(s) without capacity: {nic_gbps:g} Gbit/s")
    if nics:
        notes.append(f"{nics} switch link(s) without capacity: "
                     f"{f'{uplink_gbps:g} Gbit/s' if uplink_gbps else 'non-blocking'}")
    return notes
