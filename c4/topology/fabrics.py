"""Fabrics by name, for the simulator and ``c4 topology gen``: one place that maps a name and
the usual sizing options onto a builder. Importing this module does not import networkx."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from c4.topology.model import Topology

FABRICS: dict[str, str] = {
    "rail": "rail-optimized two-tier leaf/spine: NIC r of every host of a group on leaf "
            "'leafGrR'",
    "dual_port": "rail-optimized with dual-port NICs: each NIC's two ports on leaves "
                 "'...a' and '...b'",
    "tor": "classic two-tier leaf/spine: all NICs of a host on its rack's top-of-rack leaf",
    "three_tier": "pods of rail-optimized leaf/spine joined by a core tier",
    "single_switch": "every NIC on one switch (no uplinks)",
}
# fabrics where NIC r of every host is on rail r (a ring over the same local GPU stays on a
# rail, and traffic between rails crosses a spine)
RAIL_FABRICS = ("rail", "dual_port", "three_tier")


def build_fabric(fabric: str, hosts: int, gpus_per_host: int, *,
                 nics_per_host: int | None = None, hosts_per_leaf: int = 16,
                 spines: int | None = None, nic_gbps: float = 400.0,
                 uplink_gbps: float | None = None, groups_per_pod: int = 1,
                 cores_per_plane: int | None = None,
                 core_gbps: float | None = None) -> Topology:
    """The named fabric (see :data:`FABRICS`). ``spines`` is per pod for ``three_tier``;
    ``groups_per_pod``, ``cores_per_plane`` and ``core_gbps`` apply to ``three_tier`` only.
    Options that mean nothing for the fabric are refused rather than ignored."""
    from c4.topology import builders
    from c4.topology.model import TopologyError

    if fabric not in FABRICS:
        raise TopologyError(f"unknown fabric {fabric!r}; choose one of {', '.join(FABRICS)}")
    unused = {"spines": spines is not None, "uplink_gbps": uplink_gbps is not None,
              "groups_per_pod": groups_per_pod != 1,
              "cores_per_plane": cores_per_plane is not None, "core_gbps": core_gbps is not None}
    allowed = {"single_switch": (), "three_tier": tuple(unused)}.get(
        fabric, ("spines", "uplink_gbps"))
    bad = [k for k, given in unused.items() if given and k not in allowed]
    if bad:
        raise TopologyError(f"fabric {fabric} has no use for {', '.join(bad)}: drop "
                            f"{'it' if len(bad) == 1 else 'them'} or pick another fabric")
    if fabric in ("rail", "dual_port"):
        return builders.rail_optimized(hosts, gpus_per_host, rails=nics_per_host,
                                       hosts_per_leaf=hosts_per_leaf, spines=spines,
                                       nic_gbps=nic_gbps, uplink_gbps=uplink_gbps,
                                       dual_port=fabric == "dual_port")
    if fabric == "tor":
        return builders.top_of_rack(hosts, gpus_per_host, nics_per_host=nics_per_host,
                                    hosts_per_leaf=hosts_per_leaf, spines=spines,
                                    nic_gbps=nic_gbps, uplink_gbps=uplink_gbps)
    if fabric == "three_tier":
        return builders.three_tier(hosts, gpus_per_host, rails=nics_per_host,
                                   hosts_per_leaf=hosts_per_leaf, groups_per_pod=groups_per_pod,
                                   spines_per_pod=spines, cores_per_plane=cores_per_plane,
                                   nic_gbps=nic_gbps, uplink_gbps=uplink_gbps,
                                   core_gbps=core_gbps)
    return builders.single_switch(hosts, gpus_per_host, nic_gbps=nic_gbps,
                                  nics_per_host=nics_per_host)
