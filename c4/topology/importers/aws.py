"""AWS EC2 ``describe-instance-topology`` JSON: each instance's ``NetworkNodes``, top (spine)
to bottom (the node it attaches to). Instances become hosts (named by instance id) with a
placeholder NIC under their bottom network node; network nodes become switches, tiered from the
bottom (leaf, spine, core; a fourth layer keeps only its level). AWS gives no capacities."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from c4.topology.importers.common import Fabric, TopologyImportError, read_text
from c4.topology.importers.tiers import apply_level_reports, set_level


def import_aws(path: str | Path) -> Fabric:
    source = str(path)
    fabric = Fabric(source)
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise TopologyImportError(f"not JSON: {exc.msg}", source=source,
                                  line=exc.lineno) from None
    pages = doc if isinstance(doc, list) else [doc]
    level: dict[str, int] = {}
    n = 0
    for p, page in enumerate(pages):
        if not isinstance(page, dict) or not isinstance(page.get("Instances"), list):
            raise TopologyImportError("expected {\"Instances\": [...]} as aws ec2 "
                                      "describe-instance-topology prints it", source=source,
                                      field=f"[{p}]" if isinstance(doc, list) else None)
        for i, inst in enumerate(page["Instances"]):
            _instance(inst, fabric, level, f"Instances[{i}]")
            n += 1
        if page.get("NextToken"):
            fabric.warn("the output has a NextToken: it is one page of several, and the "
                        "instances on the other pages are missing (run the command without "
                        "--max-items, or join every page)")
    if not n:
        raise TopologyImportError("no instances (only some instance types are listed: "
                                  "p4d/p4de/p5*, trn*, ...)", source=source)
    for s, lv in level.items():
        set_level(fabric, s, lv)
    apply_level_reports(fabric, level, [])
    fabric.info(f"{n} instance(s) as hosts named by instance id; AWS names no NICs and no "
                "capacities (merge the hosts' discovery for those)")
    return fabric.finish()


def _instance(inst: Any, fabric: Fabric, level: dict[str, int], where: str) -> None:
    if not isinstance(inst, dict) or not isinstance(inst.get("InstanceId"), str):
        raise TopologyImportError("an instance needs an InstanceId", source=fabric.source,
                                  field=where)
    nodes = inst.get("NetworkNodes")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(x, str) for x in nodes):
        raise TopologyImportError("NetworkNodes must be a non-empty list of ids",
                                  source=fabric.source, field=f"{where}.NetworkNodes")
    host = fabric.add_host(inst["InstanceId"], instance_type=inst.get("InstanceType"),
                           zone=inst.get("AvailabilityZone"), zone_id=inst.get("ZoneId"),
                           placement_group=inst.get("GroupName"),
                           capacity_block=inst.get("CapacityBlockId"))
    depth = len(nodes)
    for i, nn in enumerate(nodes):
        lv = depth - 1 - i
        if level.setdefault(nn, lv) != lv:
            fabric.warn(f"network node {nn} is layer {level[nn]} for one instance and {lv} for "
                        f"{host}: kept {level[nn]}")
        fabric.add_switch(nn)
    for upper, lower in itertools.pairwise(nodes):
        fabric.link(lower, upper)
    fabric.add_cable(fabric.add_placeholder_nic(host), nodes[-1])
