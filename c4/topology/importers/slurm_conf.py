"""Slurm's ``topology.conf`` and ``scontrol show topology`` output: one definition per line of
space-separated ``Key=Value`` pairs (keys case-insensitive, ``#`` comments), node and switch
lists as hostlist expressions. ``scontrol`` adds ``Level=`` (0 = leaf) and lists every node
below an upper switch on it too; topograph-generated files carry ``# name=alias`` comments."""

from __future__ import annotations

import re
from pathlib import Path

from c4.topology.importers.common import Fabric, TopologyImportError, read_text
from c4.topology.importers.hostlist import HostlistError, expand
from c4.topology.importers.slurm import (
    SlurmBlock,
    SlurmRing,
    SlurmSwitch,
    SlurmTopology,
    to_fabric,
)

_ALIAS = re.compile(r"^#\s*([^\s=#]+)=(\S+)\s*$")
_KNOWN = {
    "switchname": {"switches", "nodes", "linkspeed", "level"},
    "blockname": {"nodes", "blockindex", "blocksize"},
    "ringname": {"nodes"},
    "blocksizes": set(),
}


def import_slurm_conf(path: str | Path) -> Fabric:
    """Import a ``topology.conf`` or a saved ``scontrol show topology``."""
    source = str(path)
    fabric = Fabric(source)
    return to_fabric(parse(read_text(path), source, fabric), fabric)


def parse(text: str, source: str, fabric: Fabric) -> SlurmTopology:
    topo = SlurmTopology()
    aliases: dict[str, str] = {}
    kinds: dict[str, int] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _ALIAS.match(line)
        if m:
            aliases[m.group(1)] = m.group(2)
            continue
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = _pairs(line, source, no)
        head, name = pairs[0]
        if head not in _KNOWN:
            raise TopologyImportError(
                f"{pairs[0][0]}= does not start a topology line; expected SwitchName=, "
                "BlockName=, BlockSizes= or RingName= (is this a topology.conf or scontrol "
                "show topology output?)", source=source, line=no)
        family = "block" if head in ("blockname", "blocksizes") else head
        kinds.setdefault(family, no)
        if len(kinds) > 1:
            first, second = sorted(kinds, key=lambda family: kinds[family])
            raise TopologyImportError(
                f"mixes {_label(first)} and {_label(second)} lines (first at line "
                f"{kinds[first]}): a topology.conf holds one topology plugin's lines",
                source=source, line=no)
        values = {}
        for key, value in pairs[1:]:
            if key not in _KNOWN[head]:
                fabric.warn(f"unknown key {key}= on a {pairs[0][0]} line: ignored", line=no)
            values[key] = value
        if head == "blocksizes":
            topo.block_sizes = _ints(name, source, no)
            continue
        if not name:
            raise TopologyImportError(f"{pairs[0][0]}= has no name", source=source, line=no)
        nodes = _hosts(values.get("nodes", ""), source, no)
        if head == "switchname":
            s = topo.switches.get(name)
            if s is not None:
                fabric.warn(f"switch {name!r} is defined again (first at line {s.line}): "
                            "its lists are joined", line=no)
            else:
                s = topo.switches[name] = SlurmSwitch(name, line=no)
            s.switches += _hosts(values.get("switches", ""), source, no)
            s.nodes += nodes
            s.link_speed = values.get("linkspeed", s.link_speed)
            if "level" in values:
                s.level = _ints(values["level"], source, no)[0]
        elif head == "blockname":
            topo.blocks.append(SlurmBlock(name, nodes, no))
        else:
            if len(nodes) > 16:
                fabric.warn(f"ring {name!r} has {len(nodes)} nodes; Slurm allows 16", line=no)
            topo.rings.append(SlurmRing(name, nodes, no))
    blocks = {b.name: b for b in topo.blocks}
    for name, alias in aliases.items():
        target = topo.switches.get(name) or blocks.get(name)
        if target is None:
            fabric.warn(f"a comment names an alias for {name!r}, which is not defined")
        else:
            target.alias = alias
    return topo


def _label(family: str) -> str:
    return {"switchname": "SwitchName (tree)", "block": "BlockName (block)",
            "ringname": "RingName (ring)"}[family]


def _pairs(line: str, source: str, no: int) -> list[tuple[str, str]]:
    out = []
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep:
            raise TopologyImportError(f"{token!r} is not Key=Value", source=source, line=no)
        out.append((key.lower(), value))
    return out


def _hosts(expr: str, source: str, no: int) -> list[str]:
    try:
        return expand(expr)
    except HostlistError as exc:
        raise TopologyImportError(f"bad hostlist: {exc}", source=source, line=no) from None


def _ints(text: str, source: str, no: int) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise TopologyImportError(f"{text!r} is not a comma-separated list of integers",
                                  source=source, line=no) from None
