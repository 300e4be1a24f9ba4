"""A training-job simulator: a 3D-parallel job on a choice of fabrics (rail-optimized by default),
with realistic noise and injected faults, written as a c4 trace with its topology and the
ground truth.

Names are imported lazily so that ``c4 --help`` does not load numpy and networkx.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FAULT_KINDS": "diagnosis.sim.config", "FaultSpec": "diagnosis.sim.config",
    "SimConfig": "diagnosis.sim.config", "SimError": "diagnosis.sim.config",
    "Simulation": "diagnosis.sim.model", "SimResult": "diagnosis.sim.run",
    "simulate": "diagnosis.sim.run",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'diagnosis.sim' has no attribute {name!r}")
