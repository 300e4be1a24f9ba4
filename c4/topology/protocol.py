"""What the engine, the NCCL analysis and the reports ask of a cluster topology.

:class:`~c4.topology.model.Topology` (the networkx model) is the one implementation c4 ships;
code that only reads a topology takes a :class:`TopologyLike`, so it states which questions
it asks and can be handed anything that answers them. Ids are the topology's node ids
(``node012``, ``node012/gpu3``, ``node012/nic1``, switch names) and link ids (two node ids,
sorted, joined by ``~``). A question about an id the topology does not have raises
:class:`TopologyError`; ask ``node in topo`` or ``topo.has_link(link)``
first where an unknown id is expected (a rank on a host outside the topology, a recorded path
through a hop it lacks).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from c4.errors import C4Error


class TopologyError(C4Error):
    """A topology that cannot answer or be made: an unknown node or link, too few GPUs for a
    job, no recorded tool outputs to discover a host from."""


@runtime_checkable
class TopologyLike(Protocol):
    def __contains__(self, node: object) -> bool:
        """Whether ``node`` is a node id of the topology."""
        ...

    def has_link(self, link: str) -> bool:
        """Whether ``link`` is a physical link of the topology."""
        ...

    # ----- nodes
    def hosts(self) -> list[str]: ...

    def gpus(self, host: str | None = None) -> list[str]: ...

    def nics(self, host: str | None = None) -> list[str]: ...

    def kind(self, node: str) -> str:
        """``host``, ``gpu``, ``nic`` or ``switch``."""
        ...

    def host_of(self, node: str) -> str: ...

    def nic_of_gpu(self, gpu: str) -> str | None: ...

    def neighbors(self, node: str) -> list[str]:
        """The nodes linked to ``node`` (its host membership included)."""
        ...

    def default_placement(self, world_size: int
                          ) -> dict[int, tuple[str, str | None, str | None]]:
        """Rank -> (host, gpu, nic) for a job that says nothing of where its ranks run."""
        ...

    # ----- links and paths
    def endpoints(self, link: str) -> tuple[str, str]: ...

    def capacity(self, link: str) -> float:
        """Gbit/s (``inf`` when the topology does not say)."""
        ...

    def links_of(self, node: str) -> list[str]: ...

    def paths(self, src_nic: str, dst_nic: str) -> list[list[str]]:
        """The candidate (ECMP) paths from one NIC to another, as node ids, crossing switches
        only: between two NICs each cabled to one switch, the paths differ from those between
        any other two NICs on the same two switches only in their ends (the localizer walks
        each pair of switches once)."""
        ...

    def paths_avoiding(self, src_nic: str, dst_nic: str,
                       down: Iterable[str]) -> list[list[str]]: ...

    def path_links(self, path: list[str]) -> list[str]: ...
