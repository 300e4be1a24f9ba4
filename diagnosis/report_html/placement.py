"""Where each rank runs, as row numbers for the per-host and per-rail views of a large job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from c4.topology.model import natural_key

if TYPE_CHECKING:
    from c4.topology import Topology

UNKNOWN_HOST = "unknown host"


@dataclass
class Placement:
    host_of: np.ndarray        # per rank: index into ``hosts``
    hosts: list[str]           # natural order (node2 before node10)
    rail_of: np.ndarray        # per rank: its rail, -1 when unknown
    rail_source: str           # how the rails were found, for the captions

    @property
    def rails(self) -> int:
        return int(self.rail_of.max()) + 1 if len(self.rail_of) else 0


def _rail(topology: Topology | None, nic: str | None, gpu: str | None) -> int | None:
    if topology is None:
        return None
    g = topology.graph
    if not nic and gpu and gpu in g:
        nic = topology.nic_of_gpu(gpu)
    if nic and nic in g:
        return topology.rail(nic)
    return None


def placement(nranks: int, hosts: dict[int, str], gpus: dict[int, str], nics: dict[int, str],
              topology: Topology | None = None) -> Placement:
    """Rank -> host index and rail. The rail is the topology's (the rail of the rank's NIC, or
    of the NIC its GPU uses), else the rank's position among its host's ranks: the usual
    GPU i on rail i of rail-optimized fabrics."""
    names = sorted({hosts.get(r, UNKNOWN_HOST) for r in range(nranks)}, key=natural_key)
    index = {h: i for i, h in enumerate(names)}
    host_of = np.array([index[hosts.get(r, UNKNOWN_HOST)] for r in range(nranks)],
                       dtype=np.int64)
    rails = [_rail(topology, nics.get(r), gpus.get(r)) for r in range(nranks)]
    if nranks and all(r is not None for r in rails):
        return Placement(host_of, names, np.asarray(rails, dtype=np.int64),
                         "the rail of each rank's NIC in the topology")
    # the position of each rank among its host's ranks
    order = np.lexsort((np.arange(nranks), host_of))
    first = np.searchsorted(host_of[order], host_of[order], side="left")
    local = np.empty(nranks, dtype=np.int64)
    local[order] = np.arange(nranks) - first
    return Placement(host_of, names, local, "each rank's position on its host (GPU i on "
                     "rail i)")
