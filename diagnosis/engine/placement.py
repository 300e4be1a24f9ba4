"""Where each rank runs, and how to name it in a report (shared specs section 3)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from c4.report import Suspect
from c4.topology.protocol import TopologyError, TopologyLike

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Place:
    host: str | None
    gpu: str | None
    nic: str | None


class Placement:
    def __init__(self, topology: TopologyLike | None = None) -> None:
        self.topology = topology
        self._places: dict[int, Place] = {}
        self._by_host: dict[str | None, set[int]] = {}    # host -> its ranks
        self._default: dict[int, tuple[str, str | None, str | None]] | None = None
        self.unknown_gpus = 0   # ranks placed on a gpu the topology does not have
        self.unknown_hosts = 0  # ranks on a host the topology does not have
        self.version = 0        # bumped whenever a rank or the topology changes

    def set_topology(self, topology: TopologyLike | None) -> None:
        """Place ranks on another topology from now on (ranks already added keep their place
        until added again)."""
        self.topology = topology
        self.version += 1
        self._default = None
        self.unknown_gpus = 0
        self.unknown_hosts = 0

    def add(self, rank: int, host: str | None, gpu: str | None, nic: str | None,
            local_rank: int | None = None) -> None:
        """``local_rank``: the rank's index on its host (torchrun's LOCAL_RANK); without a
        ``gpu`` it names the host's GPU of that index, as torch's ``cuda:LOCAL_RANK`` does."""
        self.version += 1
        topo = self.topology
        if topo is not None:
            if host is not None and not self._known(host):
                if not self.unknown_hosts:
                    log.warning("rank %d reports host %r, which the topology does not have: "
                                "its suspects stay at rank level (and those of any other rank "
                                "so placed). Set C4_HOST (or the sidecar's --host) to the "
                                "topology's host id", rank, host)
                self.unknown_hosts += 1
            elif host is not None and gpu is None and local_rank is not None \
                    and local_rank >= 0:
                gpus = topo.gpus(host)
                if local_rank < len(gpus):
                    gpu = gpus[local_rank]
            if gpu is not None and not self._known(gpu):
                # once: a trace recorded on another cluster than the topology's would repeat it
                # for every rank
                if not self.unknown_gpus:
                    log.warning("rank %d: gpu %r is not in the topology; naming the rank instead "
                                "(and for any other rank whose gpu is not; check that the "
                                "topology is the job's cluster)", rank, gpu)
                self.unknown_gpus += 1
                gpu = None
            if nic is None and gpu is not None:
                nic = topo.nic_of_gpu(gpu)
            if nic is None and gpu is None and host is not None and self._known(host):
                nics = topo.nics(host)
                nic = nics[0] if len(nics) == 1 else None   # a host's only NIC is the rank's
            if nic is not None and not self._known(nic):
                nic = None
        old = self._places.get(rank)
        if old is not None and old.host in self._by_host:
            self._by_host[old.host].discard(rank)
        self._places[rank] = Place(host or None, gpu or None, nic or None)
        self._by_host.setdefault(host or None, set()).add(rank)

    def _known(self, node: str) -> bool:
        return self.topology is not None and node in self.topology

    def get(self, rank: int) -> Place:
        place = self._places.get(rank)
        if place is not None:
            return place
        if self.topology is not None:
            # a trace without rank records: ranks fill the topology's GPUs in order
            if self._default is None:
                try:
                    self._default = self.topology.default_placement(
                        max(max(self._places, default=0) + 1, len(self.topology.gpus())))
                except TopologyError:   # more ranks than the topology has GPUs
                    self._default = {}
            slot = self._default.get(rank)
            if slot is not None:
                return Place(*slot)
        return Place(None, None, None)

    def ranks(self) -> list[int]:
        return sorted(self._places)

    def ranks_of_host(self, host: str) -> list[int]:
        return sorted(self._by_host.get(host, ()))

    def host(self, rank: int) -> str | None:
        return self.get(rank).host

    def nic(self, rank: int) -> str | None:
        return self.get(rank).nic

    def describe(self, rank: int) -> str:
        place = self.get(rank)
        where = place.gpu or place.host
        return f"rank {rank} ({where})" if where else f"rank {rank}"

    def describe_many(self, ranks: Iterable[int], limit: int = 4) -> str:
        ranks = list(ranks)
        text = ", ".join(self.describe(r) for r in ranks[:limit])
        if len(ranks) > limit:
            text += f" and {len(ranks) - limit} more"
        return text

    def suspect(self, rank: int, score: float) -> Suspect:
        """A GPU when its id is known, else the bare rank."""
        gpu = self.get(rank).gpu
        score = float(min(max(score, 0.0), 1.0))
        if gpu:
            return Suspect("gpu", gpu, score, rank=int(rank))
        return Suspect("rank", str(int(rank)), score, rank=int(rank))

    def suspects(self, ranks: Iterable[int], scores: Iterable[float]) -> list[Suspect]:
        """Ranks as suspects, folding the GPUs of a host into the host when every rank of that
        host (at least two) is among them."""
        ranks, scores = list(ranks), list(scores)
        by_host: dict[str, list[int]] = {}
        for r in ranks:
            h = self.get(r).host
            if h:
                by_host.setdefault(h, []).append(r)
        out: list[Suspect] = []
        folded: set[int] = set()
        for h, rs in by_host.items():
            all_ranks = self.ranks_of_host(h)
            if len(all_ranks) >= 2 and set(all_ranks) <= set(rs):
                best = max(s for r, s in zip(ranks, scores) if r in rs)
                out.append(Suspect("host", h, float(min(max(best, 0.0), 1.0))))
                folded.update(rs)
        out.extend(self.suspect(r, s) for r, s in zip(ranks, scores) if r not in folded)
        out.sort(key=lambda s: -s.score)
        return out
