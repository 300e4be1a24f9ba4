"""Slurm's ``topology.yaml`` (25.05+): a list of named topologies, each a ``tree``, ``block``,
``flat``, ``ring`` or ``torus3d``. One is imported: the one named, else the one marked
``cluster_default: true``, else the first; the others are reported as skipped. A flat topology
has nothing to import; a torus3d's hosts are imported unlinked (a torus joins hosts directly,
which the format cannot express), with ``torus`` and their region."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from c4.topology.importers.common import Fabric, TopologyImportError, read_text
from c4.topology.importers.hostlist import HostlistError, expand
from c4.topology.importers.slurm import (
    SlurmBlock,
    SlurmRing,
    SlurmSwitch,
    SlurmTopology,
    to_fabric,
)

SHAPES = ("tree", "block", "flat", "ring", "torus3d")


def import_slurm_yaml(path: str | Path, name: str | None = None) -> Fabric:
    """Import one topology of a ``topology.yaml``: ``name``, or the cluster default."""
    source = str(path)
    fabric = Fabric(source)
    items = _load(read_text(path), source)
    item = _choose(items, name, source, fabric)
    shape = next(s for s in SHAPES if s in item)
    where = f"topology {item['topology']!r}"
    if shape == "torus3d":
        return _torus(item, fabric, where)
    if shape == "flat":
        others = [str(i["topology"]) for i in items if "flat" not in i]
        hint = f"; pick one of {', '.join(others)} with --name" if others else ""
        raise TopologyImportError(f"{where} is flat: it names no switches and no nodes, so "
                                  f"there is nothing to import{hint}", source=source,
                                  field=where)
    topo = SlurmTopology(name=str(item["topology"]))
    body = item[shape]
    if not isinstance(body, dict):
        raise TopologyImportError(f"{where}: '{shape}' must be a mapping", source=source,
                                  field=f"{where}.{shape}")
    if shape == "tree":
        for i, sw in enumerate(_list(body, "switches", source, where)):
            f = f"{where}.tree.switches[{i}]"
            sname = _str(sw, "switch", source, f)
            topo.switches[sname] = SlurmSwitch(sname, _hosts(sw.get("children"), source, f),
                                               _hosts(sw.get("nodes"), source, f))
    elif shape == "block":
        topo.block_sizes = [int(x) for x in body.get("block_sizes") or []]
        for i, b in enumerate(_list(body, "blocks", source, where)):
            f = f"{where}.block.blocks[{i}]"
            topo.blocks.append(SlurmBlock(_str(b, "block", source, f),
                                          _hosts(b.get("nodes"), source, f)))
    else:
        for i, r in enumerate(_list(body, "rings", source, where)):
            f = f"{where}.ring.rings[{i}]"
            topo.rings.append(SlurmRing(_str(r, "ring", source, f),
                                        _hosts(r.get("nodes"), source, f)))
    return to_fabric(topo, fabric)


def _load(text: str, source: str) -> list[dict[str, Any]]:
    try:
        import yaml
    except ImportError:   # pragma: no cover - pyyaml ships with the dev and k8s extras
        raise TopologyImportError("reading topology.yaml needs PyYAML: pip install pyyaml",
                                  source=source) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TopologyImportError(f"not valid YAML: {getattr(exc, 'problem', exc)}",
                                  source=source,
                                  line=None if mark is None else mark.line + 1) from None
    if not isinstance(data, list) or not data:
        raise TopologyImportError("a topology.yaml is a list of topologies ('- topology: "
                                  "NAME' items)", source=source)
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "topology" not in item:
            raise TopologyImportError("each item needs 'topology: NAME'", source=source,
                                      field=f"[{i}]")
        shapes = [s for s in SHAPES if s in item]
        if len(shapes) != 1:
            raise TopologyImportError(f"topology {item['topology']!r} must have exactly one of "
                                      f"{', '.join(SHAPES)}; it has {shapes or 'none'}",
                                      source=source, field=f"[{i}]")
    return data


def _choose(items: list[dict[str, Any]], name: str | None, source: str,
            fabric: Fabric) -> dict[str, Any]:
    names = [str(i["topology"]) for i in items]
    if name is not None:
        if name not in names:
            raise TopologyImportError(f"no topology named {name!r}; the file has "
                                      f"{', '.join(names)}", source=source)
        chosen = items[names.index(name)]
    else:
        defaults = [i for i in items if i.get("cluster_default") is True]
        chosen = defaults[0] if defaults else items[0]
        if len(defaults) > 1:
            fabric.warn(f"{len(defaults)} topologies are cluster_default: took the first, "
                        f"{chosen['topology']!r}")
    skipped = [f"{i['topology']} ({next(s for s in SHAPES if s in i)})" for i in items
               if i is not chosen]
    if skipped:
        fabric.info(f"imported topology {chosen['topology']!r}; skipped {', '.join(skipped)} "
                    "(choose another with --name)")
    return chosen


def _torus(item: dict[str, Any], fabric: Fabric, where: str) -> Fabric:
    source = fabric.source
    body = item["torus3d"]
    n = 0
    for i, t in enumerate(_list(body, "toruses", source, where)):
        f = f"{where}.torus3d.toruses[{i}]"
        tname = _str(t, "name", source, f)
        dims = t.get("dims") or {}
        if t.get("nodes"):
            for node in _hosts(t["nodes"], source, f):
                fabric.add_host(node, torus=tname)
                n += 1
        for j, region in enumerate(t.get("regions") or []):
            rf = f"{f}.regions[{j}]"
            anchor = region.get("anchor") or {}
            rdims = region.get("dims") or {}
            for node in _hosts(region.get("nodes"), source, rf):
                fabric.add_host(node, torus=tname,
                                torus_region=[anchor.get(k) for k in "xyz"] +
                                [rdims.get(k) for k in "xyz"])
                n += 1
        fabric.info(f"torus {tname!r} is {dims.get('x')}x{dims.get('y')}x{dims.get('z')}")
    fabric.graph.graph["slurm_topology"] = str(item["topology"])
    fabric.warn(f"{where} is a 3D torus: its {n} hosts are imported without links (a torus "
                "joins hosts directly, which the topology format cannot express)")
    return fabric.finish()


def _list(body: Any, key: str, source: str, where: str) -> list[dict[str, Any]]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise TopologyImportError(f"'{key}' must be a list of mappings", source=source,
                                  field=f"{where}.{key}")
    return items


def _str(item: dict[str, Any], key: str, source: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, (str, int)) or value == "":
        raise TopologyImportError(f"missing '{key}'", source=source, field=where)
    return str(value)


def _hosts(expr: Any, source: str, where: str) -> list[str]:
    if expr is None:
        return []
    try:
        return expand(str(expr))
    except HostlistError as exc:
        raise TopologyImportError(f"bad hostlist: {exc}", source=source, field=where) from None
