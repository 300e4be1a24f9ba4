"""Checks a Chrome trace-event JSON document against the format's rules (the "Trace Event
Format" document that chrome://tracing and Perfetto follow): required fields and their types
per phase, and, per thread, complete events in time order and nested, not crossing (a viewer
draws crossing events of one thread wrongly)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

PHASES = set("BEXiIMCbenstfPOND")
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name",
            "thread_sort_index"}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_trace_events(doc: Any) -> list[dict[str, Any]]:
    """The events of ``doc``; an AssertionError naming the first event that breaks a rule."""
    assert isinstance(doc, dict), "the JSON object form: {\"traceEvents\": [...]}"
    events = doc["traceEvents"]
    assert isinstance(events, list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for i, e in enumerate(events):
        where = f"event {i} {e!r:.200}"
        assert isinstance(e, dict), where
        assert isinstance(e.get("name"), str) and e["name"], where
        assert e.get("ph") in PHASES, where
        assert type(e.get("pid")) is int and type(e.get("tid")) is int, where
        if "args" in e:
            assert isinstance(e["args"], dict), where
        if "cat" in e:
            assert isinstance(e["cat"], str), where
        if e["ph"] == "M":
            assert e["name"] in METADATA, where
            key = "sort_index" if e["name"].endswith("sort_index") else "name"
            assert key in e["args"], where
            if key == "name":
                assert isinstance(e["args"]["name"], str), where
            else:
                assert type(e["args"][key]) is int, where
            continue
        assert _number(e.get("ts")), where
        if e["ph"] == "X":
            assert _number(e.get("dur")) and e["dur"] >= 0, where
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        if e["ph"] in "iI":
            assert e.get("s", "t") in ("g", "p", "t"), where
    for thread, spans in by_thread.items():
        starts = [a for a, _ in spans]
        assert starts == sorted(starts), f"thread {thread}: complete events out of time order"
        open_ends: list[float] = []
        for a, b in spans:
            while open_ends and open_ends[-1] <= a + 1e-3:     # ends as the next starts
                open_ends.pop()
            assert not open_ends or b <= open_ends[-1] + 1e-3, \
                f"thread {thread}: an event from {a} to {b} crosses one ending at {open_ends[-1]}"
            open_ends.append(b)
    return events
