"""The lab's plan on paper: its topology (built with c4.topology, so the ids match what
the daemon reports) and, for every topology node and link, the namespace, interface names and
addresses that stand for it. Pure data: nothing here touches the system."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import networkx as nx

from c4.lab.spec import LabSpec
from c4.topology import Topology, link_id, rail_optimized

#: Everything the lab creates (namespaces, root-namespace links, cgroups, nft tables) starts
#: with this prefix, so that ``c4 lab down`` can find leftovers after a crash.
PREFIX = "c4l-"
#: The fabric lives in 10.44.0.0/16, inside the lab's namespaces only; the management network
#: (daemon <-> sidecars) is the last /24 of it, on a bridge the lab creates.
FABRIC = ipaddress.ip_network("10.44.0.0/16")
MGMT = ipaddress.ip_network("10.44.255.0/24")
MGMT_BRIDGE = f"{PREFIX}mgmt"
HOST_FABRIC_IF = "fab0"
HOST_MGMT_IF = "mgmt0"
#: Policy-routing tables of the traffic plan: table BASE + spine index in every leaf.
PLAN_TABLE_BASE = 100
PLAN_RULE_PRIORITY = 1000


@dataclass(frozen=True)
class End:
    """One end of a lab link: the interface ``ifname`` in namespace ``ns`` with ``addr``."""

    ns: str
    ifname: str
    addr: str


@dataclass(frozen=True)
class LabLink:
    """A topology link as a veth pair with a /30 of its own; ``a`` is the lower tier end
    (host below leaf below spine)."""

    id: str
    a: End
    b: End
    mbit: int


@dataclass
class Layout:
    spec: LabSpec
    topology: Topology
    hosts: list[str]
    leaves: list[str]
    spines: list[str]
    links: dict[str, LabLink] = field(default_factory=dict)
    #: host id -> leaf id; host id -> fabric address; host id -> management address
    leaf_of: dict[str, str] = field(default_factory=dict)
    host_addr: dict[str, str] = field(default_factory=dict)
    mgmt_addr: dict[str, str] = field(default_factory=dict)

    @property
    def mgmt_gateway(self) -> str:
        return str(MGMT.network_address + 1)

    def ns(self, node: str) -> str:
        """The namespace of a host or switch id."""
        return PREFIX + node

    def namespaces(self) -> list[str]:
        return [self.ns(n) for n in (*self.hosts, *self.leaves, *self.spines)]

    def mgmt_root_if(self, i: int) -> str:
        return f"{PREFIX}m{i}"

    def uplink(self, leaf: str, spine: str) -> LabLink:
        return self.links[link_id(leaf, spine)]

    def host_link(self, host: str) -> LabLink:
        return self.links[link_id(f"{host}/nic0", self.leaf_of[host])]

    def leaf_block(self, leaf: str) -> str:
        return f"10.44.{self.leaves.index(leaf) + 1}.0/24"


def _relabel(topo: Topology) -> Topology:
    """rail_optimized names leaves ``leaf00r0`` and spines ``spine00``; with one rail the
    recommended ids (shared specs section 1) are ``leaf00`` and ``spine0``."""
    mapping = {}
    for n, d in topo.graph.nodes(data=True):
        if d.get("kind") == "switch":
            if d.get("tier") == "leaf":
                mapping[n] = n[:n.rindex("r")]  # leaf00r0 -> leaf00
            else:
                mapping[n] = f"spine{int(n[len('spine'):])}"
    g = nx.relabel_nodes(topo.graph, mapping, copy=True)
    g.graph["kind"] = "c4_lab"
    for n in mapping.values():
        g.nodes[n].pop("rail", None)
    return Topology(g)


def build_layout(spec: LabSpec) -> Layout:
    """The topology of ``spec`` and the namespaces, veths and addresses that implement it."""
    topo = _relabel(rail_optimized(spec.hosts, spec.gpus_per_host, rails=1,
                                   hosts_per_leaf=spec.hosts_per_leaf, spines=spec.spines,
                                   nic_gbps=spec.host_mbit / 1000,
                                   uplink_gbps=spec.uplink_mbit / 1000))
    hosts = topo.hosts()
    leaves, spines = topo.switches("leaf"), topo.switches("spine")
    lay = Layout(spec, topo, hosts, leaves, spines)
    for i, host in enumerate(hosts):
        j, k = divmod(i, spec.hosts_per_leaf)
        leaf = leaves[j]
        lay.leaf_of[host] = leaf
        base = f"10.44.{j + 1}."
        lay.host_addr[host] = f"{base}{4 * k + 1}"
        lay.mgmt_addr[host] = str(MGMT.network_address + 10 + i)
        lid = link_id(f"{host}/nic0", leaf)
        lay.links[lid] = LabLink(lid, End(lay.ns(host), HOST_FABRIC_IF, f"{base}{4 * k + 1}"),
                                 End(lay.ns(leaf), f"d-{host}", f"{base}{4 * k + 2}"),
                                 spec.host_mbit)
    for j, leaf in enumerate(leaves):
        for s, spine in enumerate(spines):
            n = j * len(spines) + s
            base = f"10.44.{128 + n // 64}.{4 * (n % 64)}"
            net = ipaddress.ip_network(f"{base}/30")
            lid = link_id(leaf, spine)
            lay.links[lid] = LabLink(lid, End(lay.ns(leaf), f"u-{spine}", str(net[1])),
                                     End(lay.ns(spine), f"d-{leaf}", str(net[2])),
                                     spec.uplink_mbit)
    for lk in lay.links.values():
        for end in (lk.a, lk.b):
            if len(end.ifname) > 15:
                raise ValueError(f"interface name {end.ifname!r} is longer than 15 characters")
    return lay


def layout_routes(lay: Layout) -> dict[str, list[str]]:
    """Namespace -> ``ip route replace`` lines (without the ``ip``) of the fabric's static
    routing; idempotent, so a link that comes back up gets its routes back the same way."""
    out: dict[str, list[str]] = {}
    for host in lay.hosts:
        hl = lay.host_link(host)
        out[hl.a.ns] = [f"route replace {FABRIC} via {hl.b.addr} dev {hl.a.ifname}"]
    for leaf in lay.leaves:
        hops = " ".join(f"nexthop via {lay.uplink(leaf, sp).b.addr} "
                        f"dev {lay.uplink(leaf, sp).a.ifname} weight 1" for sp in lay.spines)
        out[lay.ns(leaf)] = [f"route replace {FABRIC} {hops}"]
        for s, spine in enumerate(lay.spines):
            up = lay.uplink(leaf, spine)
            out[lay.ns(leaf)].append(f"route replace {FABRIC} via {up.b.addr} dev {up.a.ifname} "
                                     f"table {PLAN_TABLE_BASE + s}")
    for spine in lay.spines:
        out[lay.ns(spine)] = [
            f"route replace {lay.leaf_block(leaf)} via {lay.uplink(leaf, spine).a.addr} "
            f"dev {lay.uplink(leaf, spine).b.ifname}" for leaf in lay.leaves]
    return out
