"""Building the fabric of a :class:`~c4.lab.layout.Layout` out of network namespaces, veth pairs,
static (ECMP) routes and tbf shapers, and tearing down everything with the lab prefix."""

from __future__ import annotations

import logging
from collections import defaultdict

from c4.lab import system
from c4.lab.layout import HOST_MGMT_IF, MGMT, MGMT_BRIDGE, PREFIX, Layout, layout_routes
from c4.lab.procs import (
    PSI_MOUNT,
    kill_all,
    leftover_cgroups,
    psi_mounted,
    remove_cgroup,
    unmount_psi,
)

log = logging.getLogger(__name__)

SWITCH_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    # L4 hashing: flows between the same two hosts spread over the spines
    "net.ipv4.fib_multipath_hash_policy": "1",
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    # a nexthop whose peer went down is not used (as a fabric with BFD would do)
    "net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
    "net.ipv4.conf.default.ignore_routes_with_linkdown": "1",
}


def _check_root_routes() -> None:
    """The management bridge puts 10.44.255.0/24 in the root namespace: refuse if the
    machine already routes any part of it elsewhere."""
    import ipaddress
    import json

    out = system.run(["ip", "-j", "route", "show", "table", "all"]).stdout
    for route in json.loads(out or "[]"):
        dst = route.get("dst", "")
        if dst in ("", "default") or ":" in dst or route.get("type") in ("local", "broadcast"):
            continue
        net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        if net.overlaps(MGMT) and route.get("dev") != MGMT_BRIDGE:
            raise system.LabError(f"this machine already routes {dst} (dev {route.get('dev')}), "
                                  f"which overlaps the lab's management network {MGMT}")


def build(lay: Layout) -> None:
    """Create namespaces, links, addresses, routes and shapers. Raises LabError; the caller
    tears down on failure."""
    _check_root_routes()
    root: list[str] = [f"netns add {ns}" for ns in lay.namespaces()]
    root += [f"link add {MGMT_BRIDGE} type bridge",
             f"addr add {lay.mgmt_gateway}/{MGMT.prefixlen} dev {MGMT_BRIDGE}",
             f"link set {MGMT_BRIDGE} up"]
    per_ns: dict[str, list[str]] = defaultdict(list)
    tc: dict[str, list[str]] = defaultdict(list)
    for ns in lay.namespaces():
        per_ns[ns].append("link set lo up")
    for lk in lay.links.values():
        root.append(f"link add {lk.a.ifname} netns {lk.a.ns} type veth "
                    f"peer name {lk.b.ifname} netns {lk.b.ns}")
        for end in (lk.a, lk.b):
            per_ns[end.ns] += [f"addr add {end.addr}/30 dev {end.ifname}",
                               f"link set {end.ifname} up"]
            tc[end.ns].append(system.tbf(lk.mbit, end.ifname))
    for i, host in enumerate(lay.hosts):
        rif, ns = lay.mgmt_root_if(i), lay.ns(host)
        root += [f"link add {rif} type veth peer name {HOST_MGMT_IF} netns {ns}",
                 f"link set {rif} master {MGMT_BRIDGE}", f"link set {rif} up"]
        per_ns[ns] += [f"addr add {lay.mgmt_addr[host]}/{MGMT.prefixlen} dev {HOST_MGMT_IF}",
                       f"link set {HOST_MGMT_IF} up"]
    system.ip_batch(root)
    switches = [lay.ns(n) for n in (*lay.leaves, *lay.spines)]
    for ns in switches:
        sets = " ".join(f"{k}={v}" for k, v in SWITCH_SYSCTLS.items())
        system.in_ns(ns, ["sysctl", "-q", "-w", *sets.split()])
    for ns, lines in per_ns.items():
        system.ip_batch(lines, ns)
    for ns, lines in layout_routes(lay).items():
        system.ip_batch(lines, ns)
    for ns, lines in tc.items():
        system.tc_batch(lines, ns)


def reapply_routes(lay: Layout, namespaces: set[str]) -> None:
    """Routes of these namespaces again (an interface that went down lost its routes)."""
    for ns, lines in layout_routes(lay).items():
        if ns in namespaces:
            system.ip_batch(lines, ns)


def root_nft_tables() -> list[str]:
    """nftables tables with the lab prefix in the root namespace ("family name"). The lab puts
    its tables inside its namespaces only; this is the check that none escaped."""
    import shutil

    if shutil.which("nft") is None:
        return []
    out = system.run(["nft", "list", "tables"], check=False).stdout
    return [line.split(None, 1)[1] for line in out.splitlines()
            if line.startswith("table ") and line.split()[-1].startswith(PREFIX)]


def leftovers() -> dict[str, list[str]]:
    """What exists now with the lab prefix: namespaces, root links, cgroups, nft tables."""
    return {"namespaces": [n for n in system.netns_list() if n.startswith(PREFIX)],
            "links": [n for n in system.root_links() if n.startswith(PREFIX)],
            "cgroups": [f"{c}/{n}" for c, n in leftover_cgroups()],
            "nft_tables": root_nft_tables(),
            "mounts": [str(PSI_MOUNT)] if psi_mounted() else []}


def teardown(lab_dir: str | None) -> dict[str, int]:
    """Remove every trace of a lab, found by prefix (whatever the state file says): processes
    in lab namespaces or carrying the lab marker, cgroups, namespaces, root links."""
    from c4.lab.procs import lab_processes

    counts = {"processes": 0, "cgroups": 0, "namespaces": 0, "links": 0, "nft tables": 0}
    for controller, name in leftover_cgroups():  # thaw first: frozen processes cannot exit
        remove_cgroup(controller, name)
        counts["cgroups"] += 1
    if unmount_psi():
        counts["mounts"] = 1
    namespaces = [n for n in system.netns_list() if n.startswith(PREFIX)]
    pids = {p for ns in namespaces for p in system.netns_pids(ns)}
    pids |= {p.pid for p in lab_processes()}
    if lab_dir is not None:
        pids |= {p.pid for p in lab_processes(lab_dir)}
    kill_all(sorted(pids))
    counts["processes"] = len(pids)
    system.ip_batch([f"netns del {ns}" for ns in namespaces], force=True)
    counts["namespaces"] = len(namespaces)
    links = [n for n in system.root_links() if n.startswith(PREFIX)]
    system.ip_batch([f"link del {n}" for n in links], force=True)
    counts["links"] = len(links)
    tables = root_nft_tables()
    for table in tables:
        system.run(["nft", "delete", "table", *table.split()], check=False)
    counts["nft tables"] = len(tables)
    return counts
