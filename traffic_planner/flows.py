"""Flows between NICs (shared specs section 4): reading, writing, validating."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from c4.jsonfile import read_json
from traffic_planner.errors import FlowFormatError

if TYPE_CHECKING:
    from c4.topology import Topology


@dataclass(frozen=True)
class Flow:
    """A demand of ``gbps`` from one NIC to another. ``id`` is unique within a plan; by
    convention ``PG:SRC>DST`` (``dp.3:0>1``), where ``PG`` names the collective it belongs to."""

    id: str
    src: str
    dst: str
    gbps: float

    def __post_init__(self) -> None:
        if not (isinstance(self.gbps, (int, float)) and math.isfinite(self.gbps)
                and self.gbps > 0):
            raise ValueError(f"flow {self.id!r}: gbps {self.gbps!r} is not a positive number")

    @property
    def group(self) -> str:
        """The collective (process group) the flow belongs to: its id up to the first ':'."""
        return self.id.split(":", 1)[0] if ":" in self.id else ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "src": self.src, "dst": self.dst, "gbps": self.gbps}


def flows_from_json(obj: Any, source: str = "") -> list[Flow]:
    """Parse ``{"flows": [...]}``; :class:`FlowFormatError` names the field at fault."""
    if not isinstance(obj, dict) or not isinstance(obj.get("flows"), list):
        raise FlowFormatError('expected an object {"flows": [...]}', source=source, field="flows")
    out: list[Flow] = []
    seen: set[str] = set()
    for i, item in enumerate(obj["flows"]):
        where = f"flows[{i}]"
        if not isinstance(item, dict):
            raise FlowFormatError("a flow is an object", source=source, field=where)
        for key in ("src", "dst"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise FlowFormatError(f"flow has no NIC id in {key!r}", source=source,
                                      field=f"{where}.{key}")
        gbps = item.get("gbps")
        if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) \
                or not math.isfinite(gbps) or gbps <= 0:
            raise FlowFormatError(f"gbps {gbps!r} is not a positive number", source=source,
                                  field=f"{where}.gbps")
        fid = item.get("id", f"{item['src']}>{item['dst']}#{i}")
        if not isinstance(fid, str) or not fid:
            raise FlowFormatError(f"id {fid!r} is not a string", source=source,
                                  field=f"{where}.id")
        if fid in seen:
            raise FlowFormatError(f"flow id {fid!r} appears twice; ids must be unique",
                                  source=source, field=f"{where}.id")
        seen.add(fid)
        out.append(Flow(fid, item["src"], item["dst"], float(gbps)))
    return out


def load_flows(path: str | Path) -> list[Flow]:
    path = Path(path)
    return flows_from_json(read_json(path, "flows file", FlowFormatError), source=str(path))


def save_flows(flows: Iterable[Flow], path: str | Path) -> None:
    Path(path).write_text(json.dumps({"flows": [f.to_json() for f in flows]}, indent=1) + "\n")


def check_flows(flows: Sequence[Flow], topology: Topology, source: str = "") -> None:
    """Every flow goes between two distinct NICs of the topology; ids are unique."""
    nodes = topology.graph._node    # the plain dict: the view costs microseconds per lookup
    seen: set[str] = set()
    for i, f in enumerate(flows):
        for key in ("src", "dst"):
            nic = getattr(f, key)
            if nodes.get(nic, {}).get("kind") != "nic":
                what = "not in the topology" if nic not in nodes else \
                    f"a {nodes[nic].get('kind')}, not a nic"
                raise FlowFormatError(f"flow {f.id!r}: {key} {nic!r} is {what}", source=source,
                                      field=f"flows[{i}].{key}")
        if f.src == f.dst:
            raise FlowFormatError(f"flow {f.id!r} goes from {f.src!r} to itself", source=source,
                                  field=f"flows[{i}].dst")
        if f.id in seen:
            raise FlowFormatError(f"flow id {f.id!r} appears twice; ids must be unique "
                                  "(prefix each job's flows with its name)", source=source,
                                  field=f"flows[{i}].id")
        seen.add(f.id)
