"""Builders for common fabrics: a rail-optimized two-tier leaf/spine and a single-switch lab."""

from __future__ import annotations

import math

import networkx as nx

from diagnosis.topology.model import Topology


def _host_ids(hosts: int) -> list[str]:
    width = max(3, len(str(hosts - 1)))
    return [f"node{i:0{width}d}" for i in range(hosts)]


def _add_hosts(g: nx.Graph, hosts: int, gpus_per_host: int, nics_per_host: int,
               nic_gbps: float) -> list[str]:
    """Hosts, their GPUs and NICs; GPU i uses NIC ``i * nics // gpus``. Returns the host ids."""
    ids = _host_ids(hosts)
    nodes: list[tuple[str, dict]] = []
    edges: list[tuple[str, str, dict]] = []
    for h in ids:
        nodes.append((h, {"kind": "host"}))
        for r in range(nics_per_host):
            nic = f"{h}/nic{r}"
            nodes.append((nic, {"kind": "nic", "host": h, "rail": r}))
            edges.append((h, nic, {}))
        for i in range(gpus_per_host):
            gpu = f"{h}/gpu{i}"
            nodes.append((gpu, {"kind": "gpu", "host": h}))
            edges.append((h, gpu, {}))
            if nics_per_host:
                # The GPU's PCIe link to its NIC: given the NIC's speed, it never limits a flow.
                edges.append((gpu, f"{h}/nic{i * nics_per_host // gpus_per_host}",
                              {"gbps": nic_gbps}))
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return ids


def rail_optimized(hosts: int, gpus_per_host: int = 8, *, rails: int | None = None,
                   hosts_per_leaf: int = 16, spines: int | None = None, nic_gbps: float = 400,
                   uplink_gbps: float | None = None, dual_port: bool = False) -> Topology:
    """A two-tier rail-optimized fabric.

    Hosts form groups of ``hosts_per_leaf``; in each group, NIC ``r`` of every host connects to
    the group's leaf for rail ``r`` (``leaf{group}r{rail}``; with ``dual_port`` each NIC's two
    ports, ``nic_gbps / 2`` each, go to leaves ``...a`` and ``...b``). Every leaf connects once to
    every spine. By default the fabric is non-blocking: ``spines = hosts_per_leaf`` and uplinks
    carry as much as the leaf's downlinks.
    """
    if hosts < 1 or gpus_per_host < 0 or hosts_per_leaf < 1:
        raise ValueError("hosts and hosts_per_leaf must be positive, gpus_per_host >= 0")
    rails = gpus_per_host if rails is None else rails
    if rails < 1:
        raise ValueError("a rail-optimized fabric needs at least one rail (NIC per host)")
    spines = hosts_per_leaf if spines is None else spines
    if spines < 1:
        raise ValueError("a rail-optimized fabric needs at least one spine")
    port_gbps = nic_gbps / 2 if dual_port else nic_gbps
    if uplink_gbps is None:
        uplink_gbps = hosts_per_leaf * port_gbps / spines
    g = nx.Graph(kind="rail_optimized")
    ids = _add_hosts(g, hosts, gpus_per_host, rails, nic_gbps)
    groups = math.ceil(hosts / hosts_per_leaf)
    gw, sw = max(2, len(str(groups - 1))), max(2, len(str(spines - 1)))
    spine_ids = [f"spine{s:0{sw}d}" for s in range(spines)]
    planes = ("a", "b") if dual_port else ("",)
    nodes: list[tuple[str, dict]] = [(s, {"kind": "switch", "tier": "spine"}) for s in spine_ids]
    edges: list[tuple[str, str, dict]] = []
    for grp in range(groups):
        members = ids[grp * hosts_per_leaf:(grp + 1) * hosts_per_leaf]
        for r in range(rails):
            for plane in planes:
                leaf = f"leaf{grp:0{gw}d}r{r}{plane}"
                nodes.append((leaf, {"kind": "switch", "tier": "leaf", "rail": r}))
                edges.extend((f"{h}/nic{r}", leaf, {"gbps": port_gbps}) for h in members)
                edges.extend((leaf, s, {"gbps": uplink_gbps}) for s in spine_ids)
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return Topology(g)


def single_switch(hosts: int, gpus_per_host: int = 1, nic_gbps: float = 100) -> Topology:
    """A small lab: every host's NICs (one per GPU) on one switch, ``switch0``."""
    if hosts < 1 or gpus_per_host < 1:
        raise ValueError("hosts and gpus_per_host must be positive")
    g = nx.Graph(kind="single_switch")
    ids = _add_hosts(g, hosts, gpus_per_host, gpus_per_host, nic_gbps)
    g.add_node("switch0", kind="switch", tier="leaf")
    g.add_edges_from((f"{h}/nic{r}", "switch0", {"gbps": nic_gbps})
                     for h in ids for r in range(gpus_per_host))
    return Topology(g)
