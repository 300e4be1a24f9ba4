"""A job's topology, assembled by the daemon from what its hosts' sidecars discovered
(:class:`HostInternals`) and the fabric file it was given (``c4 daemon --topology``), and each
rank's place on it.

A rank's GPU comes from the device it announced (``RankInfo.cuda_device``: its entry of
``CUDA_VISIBLE_DEVICES``) on its host's discovered GPUs, and its NIC from the discovered GPU-NIC
pairing; a rank whose host says nothing keeps what it announced (``C4_GPU``/``C4_NIC``). Where
the two disagree discovery wins and the disagreement is reported: the announced ids are a
person's guess, the pairing is what the host itself says. Hosts matched by short name are
reported, as are hosts known to neither source and devices that name no discovered GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import networkx as nx

from c4.errors import C4Error
from c4.topology.host_internals import HostInternals
from c4.topology.importers.common import INFO, WARNING, Issue, counts, few
from c4.topology.model import Topology, natural_key

#: where a rank's place came from
DISCOVERED, ANNOUNCED, UNPLACED = "discovered", "announced", "none"


class RankLike(Protocol):
    """What assembling needs of a registered rank (``diagnosis.store.RankRecord``)."""

    @property
    def rank(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def gpu(self) -> str: ...
    @property
    def nic(self) -> str: ...
    @property
    def cuda_device(self) -> str: ...


@dataclass(frozen=True)
class RankPlace:
    rank: int
    host: str
    gpu: str | None
    nic: str | None
    source: str          # DISCOVERED, ANNOUNCED or UNPLACED

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "gpu": self.gpu, "nic": self.nic,
                "from": self.source}


@dataclass
class JobTopology:
    job: str
    topology: Topology | None
    hosts: list[str] = field(default_factory=list)          # the hosts the job's ranks run on
    discovered: list[str] = field(default_factory=list)     # ... whose internals are known
    fabric: str | None = None                               # the fabric file's source, if any
    places: dict[int, RankPlace] = field(default_factory=dict)
    host_issues: list[Issue] = field(default_factory=list)  # met joining hosts and fabric
    rank_issues: list[Issue] = field(default_factory=list)  # met placing the ranks
    # job host -> its discovered internals (what the ranks are placed with)
    internals: dict[str, HostInternals] = field(default_factory=dict, repr=False)

    @property
    def issues(self) -> list[Issue]:
        return [*self.host_issues, *self.rank_issues]

    @property
    def undiscovered(self) -> list[str]:
        known = set(self.discovered)
        return [h for h in self.hosts if h not in known]

    def to_json(self, with_graph: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job": self.job, "fabric": self.fabric, "hosts": self.hosts,
            "discovered": self.discovered, "undiscovered": self.undiscovered,
            "counts": counts(self.topology.graph) if self.topology is not None else None,
            "ranks": [self.places[r].to_json() for r in sorted(self.places)],
            "issues": [i.to_json() for i in self.issues]}
        if with_graph:
            out["topology"] = self.topology.to_json() if self.topology is not None else None
        return out


def assemble_job(job: str, ranks: Iterable[RankLike], internals: Mapping[str, HostInternals],
                 fabric: Topology | None = None, fabric_source: str = "") -> JobTopology:
    """The job's topology: ``fabric`` (may be None) with the internals of the job's hosts
    merged in (:func:`join_hosts`), and every rank placed on it (:func:`place_ranks`)."""
    ranks = list(ranks)
    jt = join_hosts(job, {r.host for r in ranks}, internals, fabric, fabric_source)
    place_ranks(jt, ranks)
    return jt


def join_hosts(job: str, hosts: Iterable[str], internals: Mapping[str, HostInternals],
               fabric: Topology | None = None, fabric_source: str = "") -> JobTopology:
    """The topology of a job running on ``hosts``, no rank placed yet: ``fabric`` (may be
    None; ``fabric_source`` names it in the report) with the discovered internals of those
    hosts merged in. ``internals`` is keyed by the host id the sidecar announced; a job host
    matches one by id, else by short name (case aside)."""
    from c4.topology.importers.host import to_fabric
    from c4.topology.importers.merge import merge

    hosts = sorted(set(hosts), key=natural_key)
    out = JobTopology(job, fabric, hosts,
                      fabric=(fabric_source or "fabric file") if fabric is not None else None)
    issues = out.host_issues
    found = _match_hosts(hosts, internals, issues)
    if found:
        try:
            frag = to_fabric(list(found.values()), source="discovery")
            # what sidecars sent is checked as a topology file would be; the fabric was when
            # it was loaded, and the merge of two valid graphs is one
            Topology.from_json(nx.node_link_data(frag.graph, edges="links"),
                               source="the discovered hosts")
        except C4Error as exc:
            issues.append(Issue(WARNING, f"the discovered hosts do not make a topology "
                                f"({exc}): placing ranks without them"))
            found = {}
        else:
            issues.extend(frag.issues)
            graph = frag.graph
            if fabric is not None:
                res = merge(fabric.graph, frag.graph, "discovery")
                graph = res.graph
                issues.extend(res.issues)
            graph.graph.pop("import_issues", None)
            out.topology = Topology(graph)
    out.internals = found
    out.discovered = [h for h in hosts if h in found]
    nowhere = [h for h in hosts if h not in found and
               (out.topology is None or h not in out.topology.graph)]
    if nowhere:
        issues.append(Issue(WARNING, f"host(s) {few(nowhere)} of job {job} were neither "
                            "discovered nor in the fabric file: their ranks name no GPU or NIC "
                            "from the topology (is their sidecar running, and with the same "
                            "--host as the ranks' C4_HOST?)"))
    return out


def place_ranks(jt: JobTopology, ranks: Iterable[RankLike],
                previous: Mapping[int, RankPlace] | None = None) -> None:
    """Place every rank on ``jt``'s topology (again: earlier places and their issues go).

    ``previous``: the places of the same ranks before their hosts' internals changed. A rank
    keeps the NIC discovery gave it then while that NIC is still in the topology: NCCL picks a
    GPU's NIC when the communicator starts and keeps it, so a NIC that went down since is
    still the one the rank's traffic crosses (and the likely culprit), not the NIC its GPU
    would be paired with now."""
    jt.places, jt.rank_issues = {}, []
    topo = jt.topology
    for r in ranks:
        place = _place(r, topo, jt.internals.get(r.host), jt.rank_issues)
        before = (previous or {}).get(int(r.rank))
        if (before is not None and before.source == DISCOVERED and place.source == DISCOVERED
                and before.gpu == place.gpu and before.nic != place.nic
                and before.nic is not None and topo is not None and before.nic in topo.graph):
            jt.rank_issues.append(Issue(INFO, f"rank {r.rank} keeps NIC {before.nic}, the one "
                                        f"its GPU used when it started ({place.host} now pairs "
                                        f"{place.gpu} with {place.nic})"))
            place = before
        jt.places[int(r.rank)] = place


def _match_hosts(hosts: list[str], internals: Mapping[str, HostInternals],
                 issues: list[Issue]) -> dict[str, HostInternals]:
    """Job host -> its internals (renamed to the job's id when matched by short name)."""
    by_short: dict[str, list[str]] = {}
    for name in internals:
        by_short.setdefault(_short(name), []).append(name)
    found: dict[str, HostInternals] = {}
    for h in hosts:
        hi = internals.get(h)
        if hi is None:
            names = by_short.get(_short(h), [])
            if len(names) > 1:
                issues.append(Issue(WARNING, f"job host {h} matches the discovered hosts "
                                    f"{few(names)} by short name: none is used"))
                continue
            if not names:
                continue
            hi = internals[names[0]]
            issues.append(Issue(INFO, f"job host {h} is discovered host {names[0]} (same short "
                                "name)"))
        found[h] = hi if hi.host == h else replace(hi, host=h)
    return found


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def _place(r: RankLike, topo: Topology | None, hi: HostInternals | None,
           issues: list[Issue]) -> RankPlace:
    announced_gpu, announced_nic = r.gpu or None, r.nic or None
    gpu = nic = None
    device = r.cuda_device
    if hi is not None and device and topo is not None:
        gpu = _gpu_of(r, device, hi, topo, issues)
        if gpu is not None:
            nic = topo.nic_of_gpu(gpu)
    if gpu is None and nic is None:
        source = ANNOUNCED if announced_gpu or announced_nic else UNPLACED
        return RankPlace(int(r.rank), r.host, announced_gpu, announced_nic, source)
    for what, said, found in (("GPU", announced_gpu, gpu), ("NIC", announced_nic, nic)):
        if said and found and said != found:
            issues.append(Issue(WARNING, f"rank {r.rank} announces {what} {said} but its host "
                                f"says {found}: using {found} (unset C4_GPU/C4_NIC to let "
                                "discovery place ranks)"))
    return RankPlace(int(r.rank), r.host, gpu or announced_gpu, nic or announced_nic,
                     DISCOVERED)


def _gpu_of(r: RankLike, device: str, hi: HostInternals, topo: Topology,
            issues: list[Issue]) -> str | None:
    if not device.isdigit():
        issues.append(Issue(INFO, f"rank {r.rank} runs on GPU {device!r} (a UUID or MIG "
                            "device); discovery numbers GPUs by index: set "
                            "CUDA_VISIBLE_DEVICES by index to place it"))
        return None
    gpu = f"{r.host}/gpu{int(device)}"
    if gpu not in topo.graph:
        issues.append(Issue(WARNING, f"rank {r.rank} runs on GPU {device} of {r.host}, which "
                            f"lists GPUs {few([str(g.index) for g in hi.gpus]) or 'none'}"))
        return None
    return gpu
