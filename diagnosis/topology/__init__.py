"""The cluster topology: a networkx graph of hosts, GPUs, NICs and switches (shared specs
section 1), with the paths between NICs. Shared by diagnosis and the traffic planner."""

from __future__ import annotations

from diagnosis.topology.builders import rail_optimized, single_switch
from diagnosis.topology.model import Topology, TopologyError, link_id, natural_key

__all__ = ["Topology", "TopologyError", "link_id", "natural_key", "rail_optimized",
           "single_switch"]
