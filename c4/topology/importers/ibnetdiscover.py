"""``ibnetdiscover`` (default or ``-p``) to a topology: switches named after their node
descriptions, HCAs as NICs of the hosts their descriptions name, cables bundled into links,
tiers inferred from the fabric's shape.

A CA's NodeDescription is usually ``"<hostname> <device>"`` (``"node01 mlx5_0"``,
``"node01 HCA-1"``); one left at the adapter's default (``"MT4129 ConnectX7   Mellanox
Technologies"``) names no host, so the HCA becomes the only NIC of a host named after its GUID
(``H-<guid>``) until a ``--name-map`` or a merge with the host's own discovery (which knows
its GUIDs) names it. SHARP aggregation nodes (CAs inside switches) are left out and counted.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from c4.topology.importers.common import (
    Fabric,
    TopologyImportError,
    clean_id,
    few,
    read_text,
)
from c4.topology.importers.ib_parse import IbDump, IbNode, parse
from c4.topology.importers.tiers import infer_tiers

#: descriptions an adapter or switch ships with: they name a product, not a machine
_DEFAULT_DESC = re.compile(r"Mellanox Technologies|Voltaire|\bInfiniHost\b|\bConnectX|^MT\d+\b"
                           r"|^Quantum\b|^SwitchX|^Infiniscale|^Switch-?IB", re.I)
_AGGREGATION = re.compile(r"Aggregation Node", re.I)
#: RDMA device names as hosts put them in a node description
_DEVICE = re.compile(r"^(mlx\d+_\w+|hca-?\d+|ib\w*\d|bnxt_re\d+|irdma\d+|efa_?\d+|erdma_\d+"
                     r"|hfi\d+_\d+|qib\d+|rxe\d+|mthca\d+|cxgb\d+_\d+|rdma\w*\d+)$", re.I)
#: the subset that are kernel RDMA device names (what ibdev2netdev and sysfs call them)
_KERNEL_DEVICE = re.compile(r"^(mlx\d+_\d+|bnxt_re\d+|irdma\d+|efa_\d+|erdma_\d+|hfi\d+_\d+"
                            r"|qib\d+|rxe\d+|mthca\d+|cxgb\d+_\d+)$")
#: NVIDIA switch descriptions: "MF0;<name>:<model>/U1"
_SWITCH_PREFIX = re.compile(r"^[A-Z0-9]+;")
_SWITCH_SUFFIX = re.compile(r":[^:\s]+/U\d+$")
_NAME_MAP_LINE = re.compile(r'^\s*(0x)?([0-9a-fA-F]{1,16})\s+"(.*)"\s*$')


def import_ibnetdiscover(path: str | Path, name_map: dict[str, str] | None = None) -> Fabric:
    """Import one ``ibnetdiscover`` output file (either format). ``name_map``: GUID (16 hex
    digits) -> NodeDescription, as ibnetdiscover's ``--node-name-map`` file gives it."""
    source = str(path)
    dump = parse(read_text(path), source)
    if name_map:
        for node in dump.nodes.values():
            if node.guid in name_map:
                node.desc = name_map[node.guid]
    return build(dump, source)


def read_name_map(path: str | Path) -> dict[str, str]:
    """An ibnetdiscover node-name-map file: ``<guid> "<name>"`` per line, ``#`` comments."""
    out: dict[str, str] = {}
    for no, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _NAME_MAP_LINE.match(line)
        if not m:
            raise TopologyImportError(f"expected '<guid> \"<name>\"', got {line.strip()!r}",
                                      source=str(path), line=no)
        out[m.group(2).lower().zfill(16)] = m.group(3)
    return out


def build(dump: IbDump, source: str) -> Fabric:
    fabric = Fabric(source)
    if not dump.nodes:
        raise TopologyImportError("no node records: not ibnetdiscover output (give the plain "
                                  "output of ibnetdiscover or ibnetdiscover -p)", source=source)
    if not dump.cables and not any(n.type != "ca" for n in dump.nodes.values()):
        first = dump.unconnected[0] if dump.unconnected else next(iter(dump.nodes.values()))
        raise TopologyImportError(
            f"partial output: CA {first.desc!r} ({first.key}) lists no connected port, and "
            "the file has no switch and no cable: the discovery saw no fabric (it ran from a "
            "port that is down or unplugged). Run ibnetdiscover from a host whose HCA port is "
            "Active (see ibstat), or on the subnet manager's node", source=source,
            line=first.line)
    if not dump.cables:
        fabric.warn(f"no cables: the file lists {len(dump.nodes)} node(s) and no connected "
                    "port (an excerpt?); switches are imported without links")
    ids = _node_ids(dump, fabric)
    agg = {k for k, n in dump.nodes.items() if n.type == "ca" and _AGGREGATION.search(n.desc)}
    sharp: set[str] = set()
    for cable in dump.cables:
        a, b = dump.nodes[cable.a], dump.nodes[cable.b]
        if cable.a in agg or cable.b in agg:
            sharp.update(ids[n.key] for n in (a, b) if n.key not in agg and n.type != "ca")
            continue
        if a.type == "ca" and b.type == "ca":
            fabric.warn(f"CAs {a.desc!r} and {b.desc!r} are cabled back to back (no switch): "
                        "the format links NICs only to switches, so this cable is left out",
                        line=cable.line)
            continue
        fabric.add_cable(ids[a.key], ids[b.key], cable.gbps,
                         (_port(a, cable.a_port), _port(b, cable.b_port)))
    for s in sharp:
        fabric.graph.nodes[s]["sharp"] = True
    if agg:
        fabric.info(f"{len(agg)} SHARP aggregation node(s) (CAs inside switches) left out; "
                    f"their {len(sharp)} switch(es) carry 'sharp': true")
    for kept, other in dump.disagreements:
        fabric.warn(f"the two ends of cable {dump.nodes[kept.a].desc!r}[{kept.a_port}] - "
                    f"{dump.nodes[kept.b].desc!r}[{kept.b_port}] disagree: "
                    f"{kept.width}{kept.speed} (line {kept.line}) vs "
                    f"{other.width}{other.speed} (line {other.line}); kept the first",
                    line=other.line)
    down = sorted((n for n in dump.unconnected if n.key not in agg), key=lambda n: n.line or 0)
    if down:
        fabric.warn(f"{len(down)} CA(s) list no connected port (down or unplugged): "
                    f"{few([f'{n.desc!r} ({n.key})' for n in down])}; they are not linked",
                    line=down[0].line)
    for n in dump.nodes.values():
        if n.type == "router":
            fabric.warn(f"router {n.desc!r} ({n.key}) is taken for a switch: c4 models no "
                        "routers between subnets", line=n.line)
    infer_tiers(fabric)
    return fabric.finish()


def _port(node: IbNode, port: int) -> int | None:
    return port if node.type != "ca" or node.ports > 1 else None


def _node_ids(dump: IbDump, fabric: Fabric) -> dict[str, str]:
    """Topology ids for the dump's nodes, creating hosts, NICs and switches."""
    ids: dict[str, str] = {}
    switch_names = {k: _switch_name(n) for k, n in dump.nodes.items() if n.type != "ca"}
    taken = Counter(v for v in switch_names.values() if v)
    for key, n in dump.nodes.items():
        if n.type == "ca":
            continue
        name = switch_names[key]
        if not name or taken[name] > 1:
            if name:
                fabric.warn(f"{taken[name]} switches share the description {n.desc!r}: "
                            f"named by GUID ({key})", line=n.line)
            name = f"S-{n.guid}" if n.type == "switch" else f"R-{n.guid}"
        ids[key] = fabric.add_switch(name, guid=n.guid, desc=n.desc or None,
                                     router=True if n.type == "router" else None)
    unnamed: list[IbNode] = []
    for key, n in dump.nodes.items():
        if n.type != "ca" or _AGGREGATION.search(n.desc):
            continue
        host, dev = _ca_name(n.desc)
        if host is None:
            unnamed.append(n)
            host, dev = f"H-{n.guid}", "hca"
        elif dev is None:
            dev = n.guid
        if host in fabric.graph and fabric.graph.nodes[host].get("kind") == "switch":
            fabric.warn(f"CA {n.desc!r} names host {host!r}, which is a switch's name: the "
                        f"host is named H-{n.guid}", line=n.line)
            host = f"H-{n.guid}"
        nic = f"{host}/{clean_id(dev)}"
        if nic in fabric.graph:
            other = fabric.graph.nodes[nic].get("guid")
            fabric.warn(f"CAs {other} and {n.guid} both describe themselves as {n.desc!r}: "
                        f"the second is {nic}-{n.guid[-4:]}", line=n.line)
            dev = f"{clean_id(dev)}-{n.guid[-4:]}"
        ids[key] = fabric.add_nic(host, clean_id(dev), guid=n.guid, desc=n.desc or None,
                                  ibdev=dev if _KERNEL_DEVICE.match(dev) else None)
    if unnamed:
        unnamed.sort(key=lambda n: n.line or 0)
        fabric.warn(f"{len(unnamed)} HCA(s) keep a default node description such as "
                    f"{unnamed[0].desc!r}, which names no host: each is the only NIC of a host "
                    "named after its GUID (H-<guid>). Set their node descriptions, pass "
                    "--name-map, or merge the hosts' own discovery (c4 topology discover knows "
                    "the GUIDs)", line=unnamed[0].line)
    return ids


def _switch_name(n: IbNode) -> str:
    desc = n.desc.strip()
    if not desc or _DEFAULT_DESC.search(desc):
        return ""
    return clean_id(_SWITCH_SUFFIX.sub("", _SWITCH_PREFIX.sub("", desc)))


def _ca_name(desc: str) -> tuple[str | None, str | None]:
    """(host, device) from a CA's description; (None, None) when it names no host."""
    desc = desc.strip()
    if not desc or _DEFAULT_DESC.search(desc):
        return None, None
    tokens = desc.split()
    if len(tokens) == 1:
        return clean_id(tokens[0]), None
    if len(tokens) == 2 and _DEVICE.match(tokens[1]):
        return clean_id(tokens[0]), tokens[1]
    return None, None
