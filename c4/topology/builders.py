"""Builders for common fabrics: rail-optimized and top-of-rack two-tier leaf/spine, a three-tier
fabric of pods joined by a core, and a single-switch lab.

Every builder numbers hosts ``node000``, ``node001``, ... and gives host ``h`` GPUs ``h/gpuI``
and NICs ``h/nicR``; GPU ``i`` of ``gpus`` uses NIC ``i * nics // gpus`` (GPUs share NICs when
a host has fewer NICs than GPUs). By default every fabric is non-blocking.
"""

from __future__ import annotations

import math

import networkx as nx

from c4.topology.model import Topology, TopologyError


def host_name(i: int, hosts: int) -> str:
    """The id the builders give host ``i`` of ``hosts`` (zero-padded to sort in order)."""
    return f"node{i:0{max(3, len(str(hosts - 1)))}d}"


def _host_ids(hosts: int) -> list[str]:
    return [host_name(i, hosts) for i in range(hosts)]


def _width(n: int) -> int:
    return max(2, len(str(n - 1)))


def _add_hosts(g: nx.Graph, hosts: int, gpus_per_host: int, nics_per_host: int,
               nic_gbps: float, *, rails: bool = True) -> list[str]:
    """Hosts, their GPUs and NICs; GPU i uses NIC ``i * nics // gpus``; with ``rails`` NIC r
    carries ``rail: r``. Returns the host ids."""
    ids = _host_ids(hosts)
    nodes: list[tuple[str, dict]] = []
    edges: list[tuple[str, str, dict]] = []
    for h in ids:
        nodes.append((h, {"kind": "host"}))
        for r in range(nics_per_host):
            nic = f"{h}/nic{r}"
            nodes.append((nic, {"kind": "nic", "host": h, "rail": r} if rails
                         else {"kind": "nic", "host": h}))
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


def _check_hosts(hosts: int, gpus_per_host: int, nics: int | None, **positive: int) -> int:
    """Validate the common arguments; returns the number of NICs per host."""
    if hosts < 1:
        raise TopologyError(f"hosts={hosts}: a fabric needs at least one host")
    if gpus_per_host < 0:
        raise TopologyError(f"gpus_per_host={gpus_per_host} is negative")
    for name, value in positive.items():
        if value < 1:
            raise TopologyError(f"{name}={value} must be at least 1")
    nics = gpus_per_host if nics is None else nics
    if nics < 1:
        raise TopologyError(f"{nics} NICs per host: a host needs at least one NIC (rail) "
                            "to reach the fabric")
    return nics


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
    rails = _check_hosts(hosts, gpus_per_host, rails, hosts_per_leaf=hosts_per_leaf)
    spines = hosts_per_leaf if spines is None else spines
    if spines < 1:
        raise TopologyError(f"spines={spines}: a rail-optimized fabric needs at least one spine")
    port_gbps = nic_gbps / 2 if dual_port else nic_gbps
    if uplink_gbps is None:
        uplink_gbps = hosts_per_leaf * port_gbps / spines
    g = nx.Graph(kind="rail_optimized")
    ids = _add_hosts(g, hosts, gpus_per_host, rails, nic_gbps)
    groups = math.ceil(hosts / hosts_per_leaf)
    gw, sw = _width(groups), _width(spines)
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


def top_of_rack(hosts: int, gpus_per_host: int = 8, *, nics_per_host: int | None = None,
                hosts_per_leaf: int = 4, spines: int | None = None, nic_gbps: float = 400,
                uplink_gbps: float | None = None) -> Topology:
    """A classic (not rail-optimized) two-tier leaf/spine.

    Hosts form racks of ``hosts_per_leaf``; every NIC of every host in rack ``k`` connects to
    that rack's top-of-rack leaf ``leaf{k}``, and every leaf connects once to every spine
    (``spine{s}``). Traffic between two hosts of a rack turns at their leaf; all other traffic
    crosses a spine. By default the fabric is non-blocking with every link as fast as a NIC:
    one spine per leaf downlink (``spines = hosts_per_leaf * nics_per_host``).
    """
    nics = _check_hosts(hosts, gpus_per_host, nics_per_host, hosts_per_leaf=hosts_per_leaf)
    spines = hosts_per_leaf * nics if spines is None else spines
    if spines < 1:
        raise TopologyError(f"spines={spines}: a leaf/spine fabric needs at least one spine")
    if uplink_gbps is None:
        uplink_gbps = hosts_per_leaf * nics * nic_gbps / spines
    g = nx.Graph(kind="top_of_rack")
    # no rail attribute: a host's NICs all share one leaf, so NIC r is on no rail of its own
    ids = _add_hosts(g, hosts, gpus_per_host, nics, nic_gbps, rails=False)
    racks = math.ceil(hosts / hosts_per_leaf)
    lw, sw = _width(racks), _width(spines)
    spine_ids = [f"spine{s:0{sw}d}" for s in range(spines)]
    nodes: list[tuple[str, dict]] = [(s, {"kind": "switch", "tier": "spine"}) for s in spine_ids]
    edges: list[tuple[str, str, dict]] = []
    for k in range(racks):
        leaf = f"leaf{k:0{lw}d}"
        nodes.append((leaf, {"kind": "switch", "tier": "leaf"}))
        edges.extend((f"{h}/nic{r}", leaf, {"gbps": nic_gbps})
                     for h in ids[k * hosts_per_leaf:(k + 1) * hosts_per_leaf]
                     for r in range(nics))
        edges.extend((leaf, s, {"gbps": uplink_gbps}) for s in spine_ids)
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return Topology(g)


def three_tier(hosts: int, gpus_per_host: int = 8, *, rails: int | None = None,
               hosts_per_leaf: int = 16, groups_per_pod: int = 1,
               spines_per_pod: int | None = None, cores_per_plane: int | None = None,
               nic_gbps: float = 400, uplink_gbps: float | None = None,
               core_gbps: float | None = None) -> Topology:
    """Pods of rail-optimized leaf/spine joined by a core tier (a three-tier fat tree).

    A pod holds ``groups_per_pod`` groups of ``hosts_per_leaf`` hosts. Inside a pod the fabric is
    :func:`rail_optimized`: NIC ``r`` of every host in group ``g`` connects to leaf
    ``leaf{g}r{r}`` (groups numbered across pods), and every leaf of the pod to every spine of
    the pod, ``pod{p}spine{s}``. The core is split into planes, one per spine index: spine ``s``
    of every pod connects to every core switch of plane ``s``
    (``core{s * cores_per_plane + k}``). Traffic inside a rail group turns at its leaf, traffic
    inside a pod at one of the pod's spines, traffic between pods crosses the core. Leaves,
    spines and cores carry ``pod`` or ``plane`` attributes.

    By default every link runs at NIC speed and nothing is oversubscribed:
    ``spines_per_pod = hosts_per_leaf`` and ``cores_per_plane`` = leaves per pod.
    """
    rails = _check_hosts(hosts, gpus_per_host, rails, hosts_per_leaf=hosts_per_leaf,
                         groups_per_pod=groups_per_pod)
    spines_per_pod = hosts_per_leaf if spines_per_pod is None else spines_per_pod
    leaves_per_pod = groups_per_pod * rails
    cores_per_plane = leaves_per_pod if cores_per_plane is None else cores_per_plane
    if spines_per_pod < 1 or cores_per_plane < 1:
        raise TopologyError(f"spines_per_pod={spines_per_pod}, cores_per_plane="
                            f"{cores_per_plane}: a three-tier fabric needs at least one of each")
    if uplink_gbps is None:
        uplink_gbps = hosts_per_leaf * nic_gbps / spines_per_pod
    if core_gbps is None:
        core_gbps = leaves_per_pod * uplink_gbps / cores_per_plane
    g = nx.Graph(kind="three_tier")
    ids = _add_hosts(g, hosts, gpus_per_host, rails, nic_gbps)
    groups = math.ceil(hosts / hosts_per_leaf)
    pods = math.ceil(groups / groups_per_pod)
    gw, pw, sw = _width(groups), _width(pods), _width(spines_per_pod)
    cw = _width(spines_per_pod * cores_per_plane)
    nodes: list[tuple[str, dict]] = []
    edges: list[tuple[str, str, dict]] = []
    core_ids = [[f"core{s * cores_per_plane + k:0{cw}d}" for k in range(cores_per_plane)]
                for s in range(spines_per_pod)]
    for s, plane in enumerate(core_ids):
        nodes.extend((c, {"kind": "switch", "tier": "core", "plane": s}) for c in plane)
    for p in range(pods):
        spine_ids = [f"pod{p:0{pw}d}spine{s:0{sw}d}" for s in range(spines_per_pod)]
        nodes.extend((sp, {"kind": "switch", "tier": "spine", "pod": p}) for sp in spine_ids)
        for s, sp in enumerate(spine_ids):
            edges.extend((sp, c, {"gbps": core_gbps}) for c in core_ids[s])
        for grp in range(p * groups_per_pod, min(groups, (p + 1) * groups_per_pod)):
            members = ids[grp * hosts_per_leaf:(grp + 1) * hosts_per_leaf]
            for r in range(rails):
                leaf = f"leaf{grp:0{gw}d}r{r}"
                nodes.append((leaf, {"kind": "switch", "tier": "leaf", "rail": r, "pod": p}))
                edges.extend((f"{h}/nic{r}", leaf, {"gbps": nic_gbps}) for h in members)
                edges.extend((leaf, sp, {"gbps": uplink_gbps}) for sp in spine_ids)
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return Topology(g)


def single_switch(hosts: int, gpus_per_host: int = 1, nic_gbps: float = 100, *,
                  nics_per_host: int | None = None) -> Topology:
    """A small lab: every host's NICs (one per GPU unless ``nics_per_host``) on one switch,
    ``switch0`` (tier ``leaf``: the fabric has no uplinks)."""
    if gpus_per_host < 1:
        raise TopologyError(f"gpus_per_host={gpus_per_host} must be at least 1")
    nics = _check_hosts(hosts, gpus_per_host, nics_per_host)
    g = nx.Graph(kind="single_switch")
    ids = _add_hosts(g, hosts, gpus_per_host, nics, nic_gbps)
    g.add_node("switch0", kind="switch", tier="leaf")
    g.add_edges_from((f"{h}/nic{r}", "switch0", {"gbps": nic_gbps})
                     for h in ids for r in range(nics))
    return Topology(g)
