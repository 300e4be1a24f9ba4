"""Kubernetes node topology labels: the switches above each node, bottom to top, from whichever
label scheme the cluster uses (FORMATS.md section 5):

- NVIDIA topograph ``fabric.topograph.run/tier-N`` and ``network.topology.nvidia.com/tier-N``
  (tier-0 nearest the node), v0.4.0 ``network.topology.nvidia.com/{leaf,spine,core}``, early
  2025 ``network.topology.nvidia.com/{block,spine,datacenter}``;
- EKS ``topology.k8s.aws/network-node-layer-N`` (layer 1 is the top);
- GKE ``cloud.google.com/gce-topology-{subblock,block}``; OCI
  ``oci.oraclecloud.com/host.{rack_id,network_block_id}``.

NVLink domains (``accelerator.topograph.run/domain``, ``network.topology.nvidia.com/accelerator``,
``nvidia.com/gpu.clique``) become the host's ``nvlink_domain``. Input: ``kubectl get nodes -o
json`` (or ``-o yaml``), or one node's labels as ``key: value`` lines (then give the host as
HOST=FILE or --host, unless a ``kubernetes.io/hostname`` label names it)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

from c4.topology.importers.common import Fabric, TopologyImportError, few, read_text
from c4.topology.importers.tiers import apply_level_reports, set_level

_TIER = re.compile(r"^(fabric\.topograph\.run|network\.topology\.nvidia\.com)/tier-(\d+)$")
_EKS = re.compile(r"^topology\.k8s\.aws/network-node-layer-(\d+)$")
#: fixed-name schemes, bottom to top
_NAMED = (
    ("network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine",
     "network.topology.nvidia.com/core"),
    ("network.topology.nvidia.com/block", "network.topology.nvidia.com/spine",
     "network.topology.nvidia.com/datacenter"),
    ("cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-block"),
    ("oci.oraclecloud.com/host.rack_id", "oci.oraclecloud.com/host.network_block_id"),
)
_DOMAIN = ("accelerator.topograph.run/domain", "network.topology.nvidia.com/accelerator",
           "nvidia.com/gpu.clique")
_HOSTNAME = "kubernetes.io/hostname"
_LINE = re.compile(r"^\s*([\w.\-/]+)\s*[:=]\s*\"?([^\"]*)\"?\s*$")


def import_k8s(path: str | Path, host: str | None = None) -> Fabric:
    source = str(path)
    fabric = Fabric(source)
    nodes = _nodes(read_text(path), source, host)
    level: dict[str, int] = {}
    without: list[str] = []
    for name, labels in nodes:
        chain = switch_chain(labels)
        dom = next((labels[k] for k in _DOMAIN if labels.get(k)), None)
        fabric.add_host(name, nvlink_domain=dom,
                        nvlink_subdomain=labels.get("accelerator.topograph.run/sub-domain"),
                        zone=labels.get("topology.kubernetes.io/zone"),
                        instance_type=labels.get("node.kubernetes.io/instance-type"))
        if not chain:
            without.append(name)
            continue
        for lv, sw in enumerate(chain):
            if level.setdefault(sw, lv) != lv:
                fabric.warn(f"switch {sw!r} is at tier {level[sw]} for one node and {lv} for "
                            f"{name}: kept {level[sw]}")
            fabric.add_switch(sw)
        for lower, upper in itertools.pairwise(chain):
            fabric.link(lower, upper)
        fabric.add_cable(fabric.add_placeholder_nic(name), chain[0])
    if without:
        fabric.warn(f"{len(without)} node(s) carry no network topology label: {few(without)} "
                    "(imported without links)")
    for s, lv in level.items():
        set_level(fabric, s, lv)
    apply_level_reports(fabric, level, [])
    return fabric.finish()


def switch_chain(labels: dict[str, str]) -> list[str]:
    """The switches above a node, bottom first, from the richest scheme its labels use."""
    chains: list[list[str]] = []
    tiers = sorted((int(m.group(2)), v) for k, v in labels.items() if (m := _TIER.match(k)) and v)
    chains.append([v for _, v in tiers])
    eks = sorted(((int(m.group(1)), v) for k, v in labels.items() if (m := _EKS.match(k)) and v),
                 reverse=True)
    chains.append([v for _, v in eks])
    chains.extend([labels[k] for k in keys if labels.get(k)] for keys in _NAMED)
    return max(chains, key=len)


def _nodes(text: str, source: str, host: str | None) -> list[tuple[str, dict[str, str]]]:
    stripped = text.lstrip()
    doc: Any = None
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TopologyImportError(f"not JSON: {exc.msg}", source=source,
                                      line=exc.lineno) from None
    elif stripped.startswith(("apiVersion", "items", "kind", "metadata")):
        import yaml
        doc = yaml.safe_load(text)
    if doc is not None:
        items = doc.get("items", [doc]) if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise TopologyImportError("expected kubectl get nodes -o json/yaml output",
                                      source=source)
        out = []
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(meta, dict) or not meta.get("name"):
                raise TopologyImportError("a node needs metadata.name", source=source,
                                          field=f"items[{i}]")
            out.append((str(meta["name"]), {str(k): str(v) for k, v in
                                            (meta.get("labels") or {}).items()}))
        return out
    labels: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(("#", "labels:")):
            continue
        m = _LINE.match(line)
        if not m:
            raise TopologyImportError(f"expected 'key: value', got {line.strip()[:60]!r}",
                                      source=source, line=no)
        labels[m.group(1)] = m.group(2).strip()
    name = host or labels.get(_HOSTNAME)
    if not name:
        raise TopologyImportError("these labels do not say which node they belong to: give "
                                  "the file as HOST=FILE or pass --host (or include "
                                  f"{_HOSTNAME})", source=source)
    return [(name, labels)]
