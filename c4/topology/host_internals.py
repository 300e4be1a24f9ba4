"""One host's internals: its GPUs, its NICs, which NIC each GPU uses, and which switch port each
NIC is cabled to, assembled from whatever the host could say (``nvidia-smi topo -m``,
``ibdev2netdev``, ``lldpctl``, sysfs). :func:`c4.topology.discover.discover_host` runs
the tools; ``c4 topology import host`` reads the saved outputs or the discovery's JSON.

A NIC is named after its RDMA device (``mlx5_0``) when one is known, else after its network
interface (``eth0``): the topology id is ``<host>/<name>``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from c4.topology.importers.common import INFO, WARNING, Issue, few
from c4.topology.importers.ibdev2netdev import DevicePort
from c4.topology.importers.lldp import Neighbor
from c4.topology.importers.nvidia_smi import GpuMatrix, pair_gpus
from c4.topology.sysfs import SysfsDevice

VERSION = 1


@dataclass
class GpuInfo:
    index: int
    nic: str | None = None      # the NIC it uses (a NicInfo name)
    pcie: str | None = None     # PCIe distance to that NIC: PIX, PXB, PHB, NODE, SYS
    numa: int | None = None
    cpus: str | None = None


@dataclass
class NicInfo:
    name: str
    ibdev: str | None = None
    netdev: str | None = None
    port: int | None = None
    state: str | None = None        # up / down
    link_layer: str | None = None   # InfiniBand / Ethernet
    gbps: float | None = None
    guid: str | None = None         # node GUID (16 hex)
    port_guid: str | None = None
    pci: str | None = None
    switch: str | None = None       # the LLDP neighbor: system name (or chassis id)
    switch_port: str | None = None
    switch_descr: str | None = None


@dataclass
class HostInternals:
    host: str
    gpus: list[GpuInfo] = field(default_factory=list)
    nics: list[NicInfo] = field(default_factory=list)
    nvlink: str | None = None       # how the GPUs reach each other (NV18, PIX, ...)
    sources: list[str] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    def nic(self, name: str) -> NicInfo | None:
        return next((n for n in self.nics if n.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "host": self.host,
                "gpus": [_compact(asdict(g)) for g in self.gpus],
                "nics": [_compact(asdict(n)) for n in self.nics],
                "nvlink": self.nvlink, "sources": self.sources,
                "issues": [i.to_json() for i in self.issues]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> HostInternals:
        """Read :meth:`to_json`'s object; ``KeyError``/``TypeError`` on a malformed one."""
        gk = {f.name for f in fields(GpuInfo)}
        nk = {f.name for f in fields(NicInfo)}
        return cls(str(obj["host"]),
                   [GpuInfo(**{k: v for k, v in g.items() if k in gk}) for g in obj["gpus"]],
                   [NicInfo(**{k: v for k, v in n.items() if k in nk}) for n in obj["nics"]],
                   obj.get("nvlink"), list(obj.get("sources") or []),
                   [Issue.from_json(i) for i in obj.get("issues") or []])


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def assemble(host: str, matrix: GpuMatrix | None = None,
             ports: list[DevicePort] | None = None, neighbors: list[Neighbor] | None = None,
             devices: dict[str, SysfsDevice] | None = None,
             sources: list[str] | None = None) -> HostInternals:
    """Join what each tool said into one record. NICs are matched across tools by RDMA device
    name and network interface; GPUs are paired with the nearest NIC whose link is not down."""
    hi = HostInternals(host, sources=list(sources or []))
    by_name: dict[str, NicInfo] = {}
    by_netdev: dict[str, NicInfo] = {}

    def nic_for(ibdev: str | None, netdev: str | None, label: str | None = None) -> NicInfo:
        n = (by_name.get(ibdev or label or "") or (by_netdev.get(netdev) if netdev else None))
        if n is None:
            n = NicInfo(ibdev or label or netdev or "?", ibdev=ibdev)
            by_name[n.name] = n
            hi.nics.append(n)
        if netdev and not n.netdev:
            n.netdev = netdev
            by_netdev[netdev] = n
        return n

    for dev in (devices or {}).values():
        n = nic_for(dev.ibdev, None)
        n.guid, n.port = dev.guid, None
        if dev.ports:
            p = min(dev.ports.values(), key=lambda p: p.port)
            nic_for(dev.ibdev, p.netdev)
            n.port, n.gbps, n.state, n.link_layer = p.port, p.gbps, p.state, p.link_layer
            n.port_guid = p.port_guid
        if len(dev.ports) > 1:
            hi.issues.append(Issue(INFO, f"{dev.ibdev} has {len(dev.ports)} ports: the NIC "
                                   "stands for its first"))
    for dp in ports or []:
        n = nic_for(dp.ibdev, dp.netdev)
        n.port = n.port or dp.port
        n.state = dp.state or n.state
        n.pci = dp.pci or n.pci
    if matrix is not None:
        for name in matrix.nics:     # NICk: a matrix without its legend (no device name)
            nic_for(None, None, name) if name.startswith("NIC") else nic_for(name, None)
        _gpus(hi, matrix, {n.name for n in hi.nics if n.state == "down"})
    for nb in neighbors or []:
        n = by_netdev.get(nb.iface) or nic_for(None, nb.iface)
        n.switch, n.switch_port, n.switch_descr = nb.switch_id, nb.port, nb.switch_descr
        if nb.switch is None:
            hi.issues.append(Issue(WARNING, f"{nb.iface}'s neighbor gives no system name: the "
                                   f"switch is named by its chassis id {nb.chassis_id}"))
    if ports is not None and matrix is not None:
        absent = [n for n in matrix.nics if n not in {p.ibdev for p in ports}]
        if absent:
            hi.issues.append(Issue(WARNING, f"nvidia-smi lists NIC(s) {few(absent)} that "
                                   "ibdev2netdev does not"))
    return hi


def _gpus(hi: HostInternals, matrix: GpuMatrix, down: set[str]) -> None:
    hi.issues.extend(matrix.issues)
    usable = [n for n in matrix.nics if n not in down]
    if down & set(matrix.nics) and not usable:
        hi.issues.append(Issue(WARNING, "every NIC near the GPUs is down: paired anyway"))
        usable = list(matrix.nics)
    elif down & set(matrix.nics):
        hi.issues.append(Issue(INFO, f"NIC(s) {few(sorted(down & set(matrix.nics)))} are down: "
                               "no GPU is paired with them"))
    pairs, issues = pair_gpus(matrix, usable)
    hi.issues.extend(issues)
    hi.gpus = []
    for g in matrix.gpus:
        nic, pcie = pairs.get(g, (None, None))
        hi.gpus.append(GpuInfo(g, nic, pcie, matrix.numa.get(g), matrix.cpus.get(g)))
    links = set(matrix.nvlink.values())
    hi.nvlink = links.pop() if len(links) == 1 else (", ".join(sorted(links)) or None)
    if not matrix.nics and matrix.gpus:
        hi.issues.append(Issue(WARNING, "the matrix lists no NIC: no GPU can be paired with "
                               "one (was it run on a host without RDMA NICs, or cut?)"))
