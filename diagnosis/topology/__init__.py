"""The cluster topology: a networkx graph of hosts, GPUs, NICs and switches (shared specs
section 1), with the paths between NICs. Shared by diagnosis and the traffic planner.

Names load on first use, so that importing ``diagnosis.topology.cli`` (for ``c4 --help``) does not
import networkx."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnosis.topology.builders import (
        rail_optimized,
        single_switch,
        three_tier,
        top_of_rack,
    )
    from diagnosis.topology.model import Topology, TopologyError, link_id, natural_key

__all__ = ["Topology", "TopologyError", "link_id", "natural_key", "rail_optimized",
           "single_switch", "three_tier", "top_of_rack"]
_HOME = {"Topology": "model", "TopologyError": "model", "link_id": "model",
         "natural_key": "model", "rail_optimized": "builders", "single_switch": "builders",
         "three_tier": "builders", "top_of_rack": "builders"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
