"""The ``health`` record, shared by the sidecar that ships it, the daemon that stores it and the
trace reader and writer: a plain dataclass and its proto (``HealthSample``) and JSON forms.

A record is either a *sample* (``values`` and/or ``reasons`` of one component at ``t_ns``) or an
*event* (``event`` set: an XID, AER error or link going down, with ``code`` and ``text``).
``component`` is a topology id (``node012/gpu3``, ``node012/nic1``); empty means the host.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from c4.proto import c4_pb2

#: the kinds of health events (collectors/health/kernel.py names them)
EVENTS = ("xid", "sxid", "gpu_off_bus", "aer", "aer_bit", "ib_link", "ib_module", "oom",
          "nvswitch_error", "dcgm_diag")

#: clock event ("throttle") reasons by NVML bit (nvmlClocksEventReason*, DCGM field 112)
REASON_BITS = {
    0x1: "idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake", 0x100: "display_clocks",
}
#: the reasons that slow a GPU under load for a cause outside the job (idle, app clocks,
#: sync boost and a power cap on power-limited parts are normal)
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake"})


@dataclass(frozen=True)
class HealthRecord:
    host: str
    t_ns: int
    component: str = ""
    values: Mapping[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    event: str = ""
    code: int | None = None
    text: str = ""

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("a health record needs the host it was read on")
        if self.event and self.event not in EVENTS:
            raise ValueError(f"health event {self.event!r} is not one of {', '.join(EVENTS)}")
        if not self.event and not self.values and not self.reasons:
            raise ValueError("a health record carries values, reasons or an event; this one "
                             "has none")
        for name, v in self.values.items():
            if not math.isfinite(v):
                raise ValueError(f"health value {name} is {v}: leave a missing value out")

    @property
    def target(self) -> str:
        """The topology id the record is about: the component, else the host."""
        return self.component or self.host

    def to_json(self) -> dict[str, Any]:
        """The trace line (without ``"type"``'s neighbours left at their defaults)."""
        obj: dict[str, Any] = {"type": "health", "host": self.host, "t_ns": int(self.t_ns)}
        if self.component:
            obj["component"] = self.component
        if self.values:
            obj["values"] = {k: float(v) for k, v in self.values.items()}
        if self.reasons:
            obj["reasons"] = list(self.reasons)
        if self.event:
            obj["event"] = self.event
        if self.code is not None:
            obj["code"] = int(self.code)
        if self.text:
            obj["text"] = self.text
        return obj

    def to_proto(self) -> c4_pb2.HealthSample:
        msg = c4_pb2.HealthSample(host=self.host, component=self.component, t_ns=self.t_ns,
                                  reasons=list(self.reasons), event=self.event, text=self.text)
        msg.values.update(self.values)
        if self.code is not None:
            msg.code = self.code
        return msg

    @classmethod
    def from_proto(cls, msg: c4_pb2.HealthSample) -> HealthRecord:
        return cls(msg.host, msg.t_ns, msg.component, dict(msg.values), tuple(msg.reasons),
                   msg.event, msg.code if msg.HasField("code") else None, msg.text)


def health_batch(records: Iterable[HealthRecord], job: str = "",
                 attempt: int = 0) -> c4_pb2.HealthBatch:
    return c4_pb2.HealthBatch(job=job, attempt=attempt,
                              samples=[r.to_proto() for r in records])
