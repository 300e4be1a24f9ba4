"""Host-layer sources (``nvidia-smi topo -m``, ``ibdev2netdev``, ``lldpctl -f json``, the JSON
of ``c4 topology discover``) made into a topology fragment: each host with its GPUs, its NICs,
the GPU-NIC pairing, and the switch port of each NIC that LLDP saw.

None of the tools' outputs names the host it ran on (the discovery JSON does): files are given as
``HOST=FILE``, or the host comes from ``--host``. Several files of one host are joined before
the GPUs are paired, so a NIC that ``ibdev2netdev`` reports down gets no GPU."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from c4.topology.host_internals import HostInternals, assemble
from c4.topology.importers import ibdev2netdev, lldp, nvidia_smi
from c4.topology.importers.common import (
    Fabric,
    Issue,
    TopologyImportError,
    clean_id,
    read_text,
)
from c4.topology.importers.tiers import infer_tiers

KINDS = ("nvidia-smi", "ibdev2netdev", "lldp", "discover")


def detect(text: str) -> str:
    """Which host-layer output a file holds (one of :data:`KINDS`)."""
    head = text.lstrip()
    if head.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return "lldp"       # let the LLDP reader name the JSON error
        return "discover" if isinstance(obj, dict) and "host" in obj and "nics" in obj \
            else "lldp"
    if "==>" in text or "<===>" in text:
        return "ibdev2netdev"
    return "nvidia-smi"


@dataclass
class _HostFiles:
    """The outputs given for one host, parsed."""

    matrix: nvidia_smi.GpuMatrix | None = None
    ports: list[ibdev2netdev.DevicePort] | None = None
    neighbors: list[lldp.Neighbor] | None = None
    files: dict[str, str] = field(default_factory=dict)     # kind -> file

    def add(self, kind: str, text: str, path: Path, host: str) -> None:
        if kind in self.files:
            raise TopologyImportError(f"a second {kind} output for host {host!r} (the first: "
                                      f"{self.files[kind]})", source=str(path))
        self.files[kind] = str(path)
        if kind == "nvidia-smi":
            self.matrix = nvidia_smi.parse(text, str(path))
        elif kind == "ibdev2netdev":
            self.ports = ibdev2netdev.parse(text, str(path))
        elif kind == "lldp":
            self.neighbors = lldp.parse(text, str(path))
        else:
            raise TopologyImportError(f"unknown host source {kind!r}; one of "
                                      f"{', '.join(KINDS)}", source=str(path))


def read_internals(files: Iterable[tuple[str | None, Path]], kind: str | None = None
                   ) -> list[HostInternals]:
    """Host internals from ``(host, file)`` pairs, files of one host joined. ``kind`` forces
    the format (else each file's is detected). A tool's output needs its host."""
    per_host: dict[str, _HostFiles] = {}
    records: list[HostInternals] = []
    for host, path in files:
        text = read_text(path)
        k = kind or detect(text)
        if k == "discover":
            records.append(_discovered(text, path, host))
            continue
        if not host:
            raise TopologyImportError(f"{k} output does not say which host it came from: give "
                                      "it as HOST=FILE or pass --host", source=str(path))
        per_host.setdefault(host, _HostFiles()).add(k, text, path, host)
    for host, got in per_host.items():
        records.append(assemble(host, got.matrix, got.ports, got.neighbors, None,
                                [f"{k}:{f}" for k, f in got.files.items()]))
    return records


def _discovered(text: str, path: Path, host: str | None) -> HostInternals:
    try:
        hi = HostInternals.from_json(json.loads(text))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise TopologyImportError(f"not the JSON of c4 topology discover ({exc!r})",
                                  source=str(path)) from None
    if host and host != hi.host:
        raise TopologyImportError(f"given as host {host!r}, but the discovery says it is "
                                  f"{hi.host!r}", source=str(path))
    return hi


def to_fabric(records: list[HostInternals], source: str = "") -> Fabric:
    """The hosts' fragment of the topology (hosts, GPUs, NICs, GPU-NIC links, LLDP switches)."""
    fabric = Fabric(source)
    for hi in records:
        if hi.host in fabric.graph:
            raise TopologyImportError(f"host {hi.host!r} is given twice", source=source)
        fabric.add_host(hi.host, nvlink=hi.nvlink)
        ids: dict[str, str] = {}
        for n in hi.nics:
            nic = ids[n.name] = fabric.add_nic(
                hi.host, clean_id(n.name), ibdev=n.ibdev, netdev=n.netdev, guid=n.guid,
                port_guid=n.port_guid, state=n.state, link_layer=n.link_layer, gbps=n.gbps,
                pci=n.pci)
            if n.switch:
                sw = fabric.add_switch(clean_id(n.switch), desc=n.switch_descr)
                fabric.add_cable(nic, sw, n.gbps, (n.port, n.switch_port))
        for g in hi.gpus:
            gpu = fabric.add_gpu(hi.host, g.index, numa=g.numa)
            if g.nic is not None and g.nic in ids:
                nic_gbps = fabric.graph.nodes[ids[g.nic]].get("gbps")
                fabric.link(gpu, ids[g.nic], pcie=g.pcie, gbps=nic_gbps)
        for i in hi.issues:
            fabric.issues.append(Issue(i.level, f"host {hi.host}: {i.message}",
                                       i.source or source, i.line))
        down = [n.name for n in hi.nics if n.state == "down"]
        if down:
            fabric.info(f"host {hi.host}: NIC(s) {', '.join(down)} are down")
    infer_tiers(fabric)
    return fabric.finish()
