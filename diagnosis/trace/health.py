"""``health`` lines of a trace (this project's record kind, documented in
diagnosis/trace/README.md beside the shared format's kinds) → HealthRecord, checked field by
field so a bad line is named with its field."""

from __future__ import annotations

import math

from c4.proto.health import EVENTS, HealthRecord
from diagnosis.trace.fields import Fields


def health_record(f: Fields) -> HealthRecord:
    host = f.string("host", "a host id")
    t_ns = f.integer("t_ns")
    component = f.opt_string("component", "a topology id (gpu or nic)") or ""
    values = f.rec.get("values", {})
    if not isinstance(values, dict):
        f.fail("values", f"values must be an object of signal name to number, got {values!r}")
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            f.fail("values", f"value of {name!r} must be a finite number, got {v!r}")
    reasons = f.rec.get("reasons", [])
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        f.fail("reasons", f"reasons must be a list of strings, got {reasons!r}")
    event = f.rec.get("event", "")
    if event and event not in EVENTS:
        f.fail("event", f"event {event!r} is not one of {', '.join(EVENTS)}")
    code = f.opt_integer("code")
    text = f.opt_string("text") or ""
    if not event and not values and not reasons:
        f.fail("values", "a health record needs values, reasons or an event")
    return HealthRecord(host, t_ns, component, {k: float(v) for k, v in values.items()},
                        tuple(reasons), event, code, text)
