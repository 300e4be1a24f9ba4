"""The edge reducer: turns full per-call telemetry into the reduced stream of trace format
version 2 (sampled calls, ``progress``, ``linkstat``), pure numpy and streaming, for the node
sidecar and the simulator alike. See :mod:`c4.reduce.edge`."""

from __future__ import annotations

from c4.reduce.edge import DEFAULT_WINDOW_NS, EdgeReducer, Reduced, ReduceStats
from c4.reduce.progress import direction
from c4.reduce.sampling import kept_rows

__all__ = ["DEFAULT_WINDOW_NS", "EdgeReducer", "ReduceStats", "Reduced", "direction",
           "kept_rows"]
