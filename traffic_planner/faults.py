"""Links to avoid, from ``--down`` ids and from diagnosis fault reports (shared specs section 3)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from c4.jsonfile import read_json
from c4.topology import Topology
from traffic_planner.errors import FlowFormatError, UnknownLinkError

AVOID_TYPES = ("link", "switch", "nic")


def down_links(topology: Topology, ids: Iterable[str]) -> set[str]:
    """Link ids as given, or every link of a node id (a switch or NIC taken out whole)."""
    out: set[str] = set()
    known = topology.index.links
    for item in ids:
        if item in known:
            out.add(item)
        elif item in topology.graph and topology.kind(item) in ("switch", "nic"):
            out.update(topology.links_of(item))
        else:
            raise UnknownLinkError(f"{item!r} is neither a link id of the topology (two node "
                                   "ids, sorted, joined by '~') nor a switch or nic id")
    return out


def down_from_reports(path: str | Path, topology: Topology, threshold: float = 0.5) -> set[str]:
    """The links of every link, switch or NIC suspect scoring above ``threshold`` in a report
    file (``{"reports": [...]}``). Suspects the topology does not know are skipped: a report may
    come from a different view of the cluster."""
    path = Path(path)
    obj = read_json(path, "fault report", FlowFormatError)
    if not isinstance(obj, dict) or not isinstance(obj.get("reports"), list):
        raise FlowFormatError('expected an object {"reports": [...]}', source=str(path),
                              field="reports")
    ids = []
    for i, rep in enumerate(obj["reports"]):
        suspects = rep.get("suspects") if isinstance(rep, dict) else None
        if not isinstance(suspects, list):
            raise FlowFormatError("report has no list of suspects", source=str(path),
                                  field=f"reports[{i}].suspects")
        for j, s in enumerate(suspects):
            where = f"reports[{i}].suspects[{j}]"
            if not isinstance(s, dict) or not isinstance(s.get("type"), str):
                raise FlowFormatError("suspect has no type", source=str(path),
                                      field=f"{where}.type")
            score = s.get("score")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise FlowFormatError(f"score {score!r} is not a number", source=str(path),
                                      field=f"{where}.score")
            if s["type"] in AVOID_TYPES and score > threshold:
                sid = str(s.get("id", ""))
                if sid in topology.index.links or sid in topology.graph:
                    ids.append(sid)
    return down_links(topology, ids)
