"""A health finding: what a rule or the peer model concluded about one component over a span of
time, with the evidence, the action to take, and which kinds of timing fault it can explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "critical")

#: finding kind -> the timing report kinds it can be the cause of
EXPLAINS: dict[str, frozenset[str]] = {
    "thermal_slowdown": frozenset({"noncomm_slow"}),
    "power_brake": frozenset({"noncomm_slow"}),
    "clock_slowdown": frozenset({"noncomm_slow"}),
    "pcie_downtrain": frozenset({"noncomm_slow", "comm_slow"}),
    "ecc_storm": frozenset({"noncomm_slow", "error", "noncomm_hang"}),
    "remap_pending": frozenset({"error"}),
    "remap_failure": frozenset({"error", "noncomm_hang"}),
    "reset_required": frozenset({"error", "noncomm_hang"}),
    "xid": frozenset({"error", "noncomm_hang", "comm_hang", "noncomm_slow"}),
    "xid_app": frozenset({"error", "noncomm_hang"}),
    "gpu_off_bus": frozenset({"error", "noncomm_hang", "comm_hang"}),
    "pcie_aer": frozenset({"error", "noncomm_slow", "comm_slow"}),
    "port_down": frozenset({"comm_hang", "comm_slow", "error"}),
    "ib_errors": frozenset({"comm_slow", "comm_hang"}),
    "cpu_pressure": frozenset({"noncomm_slow"}),
    "memory_pressure": frozenset({"noncomm_slow", "noncomm_hang"}),
    "io_pressure": frozenset({"noncomm_slow"}),
    "cpu_steal": frozenset({"noncomm_slow"}),
    "oom": frozenset({"error", "noncomm_hang"}),
    "peer_outlier": frozenset({"noncomm_slow", "comm_slow"}),
    "dcgm_diag": frozenset({"noncomm_slow", "error", "noncomm_hang"}),
}


@dataclass
class Finding:
    """``kind`` (a key of EXPLAINS) on ``target`` (a topology id: ``node3/gpu1``, ``node3/nic0``
    or the host ``node3``) from ``first_ns`` to ``last_ns``. ``hard`` findings are evidence no
    timing is needed for (an XID 79, a port down): they become ``health`` reports of their own.
    ``summary`` is one sentence with the evidence; ``action`` what to do."""

    kind: str
    target: str
    host: str
    first_ns: int
    last_ns: int
    severity: str
    hard: bool
    summary: str
    action: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in EXPLAINS:
            raise ValueError(f"finding kind {self.kind!r} is not one of {', '.join(EXPLAINS)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {SEVERITIES}")

    @property
    def explains(self) -> frozenset[str]:
        return EXPLAINS[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "host": self.host,
                "first_ns": int(self.first_ns), "last_ns": int(self.last_ns),
                "severity": self.severity, "hard": self.hard, "summary": self.summary,
                "action": self.action, "evidence": self.evidence}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Finding:
        return cls(obj["kind"], obj["target"], obj["host"], int(obj["first_ns"]),
                   int(obj["last_ns"]), obj["severity"], bool(obj["hard"]), obj["summary"],
                   obj["action"], dict(obj.get("evidence") or {}))
