"""The lab's fault log as ground truth, in the shape of the simulator's ``truth.json`` faults
(diagnosis/sim/README.md), so that the same scorer can judge live diagnoses of the lab."""

from __future__ import annotations

from typing import Any

from c4.topology import Topology

# lab fault -> (truth kind, expected report kind)
KINDS = {"slow-link": ("slow_link", "comm_slow"), "lossy-link": ("lossy_link", "comm_slow"),
         "dead-link": ("dead_link", "comm_hang"), "slow-gpu": ("slow_gpu", "noncomm_slow"),
         "hang": ("rank_hang", "noncomm_hang"), "crash": ("crash", "error"),
         "cpu-contention": ("cpu_contention", "noncomm_slow"),
         "memory-pressure": ("memory_pressure", "noncomm_slow")}


def _suspect(topo: Topology, comp: str) -> dict[str, str]:
    if "~" in comp:
        return {"type": "link", "id": comp}
    return {"type": topo.kind(comp), "id": comp}


def truth(st: dict[str, Any]) -> dict[str, Any]:
    """``{"version": 1, "faults": [...]}`` for every fault injected into the lab so far."""
    topo = Topology.load(st["topology"])
    faults = []
    for rec in st.get("faults", []):
        kind, expected = KINDS[rec["kind"]]
        comps = [_suspect(topo, c) for c in rec["components"]]
        accept = list(comps)
        for c in comps:
            if c["type"] == "link":  # a NIC and its cable lie on the same paths
                accept += [{"type": "nic", "id": n} for n in topo.endpoints(c["id"])
                           if topo.kind(n) == "nic"]
            if c["type"] == "host" and kind == "slow_gpu":
                kind = "slow_host"
            if c["type"] == "host" and kind in ("cpu_contention", "memory_pressure"):
                # every rank of the host is slowed: its GPUs stand for it
                accept += [{"type": "gpu", "id": g} for g in topo.gpus(c["id"])]
            if c["type"] == "gpu" and kind in ("cpu_contention", "memory_pressure"):
                accept.append({"type": "host", "id": topo.host_of(c["id"])})
        accept += [{"type": "rank", "id": str(r)} for r in rec.get("ranks", [])]
        faults.append({
            "kind": kind, "lab_kind": rec["kind"], "target": rec["target"],
            "component": comps[0] if len(comps) == 1 else {"type": "set", "ids": comps},
            "accept": accept, "expected_report": expected, "ranks": rec.get("ranks", []),
            "params": rec.get("params", {}),
            "onset_ns": int(rec["injected_at"] * 1e9),
            "end_ns": int(rec["cleared_at"] * 1e9) if rec["cleared_at"] else None})
    return {"version": 1, "source": "c4 lab", "jobs": st.get("jobs", []), "faults": faults}
