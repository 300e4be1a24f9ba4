"""The job as NCCL's sources describe it, reconciled: processes, communicators, global ranks.

No source says everything. The Inspector names a process by (hostname, pid) and its rank in
each communicator; RAS by (IP address, pid), with its CUDA device; ``NCCL_DEBUG`` lines by
(hostname, pid) with the CUDA device, the NICs and the node's IP. :class:`JobModel` takes what
each says (``see_member``, ``see_process``, ``alias``) and :meth:`JobModel.resolve` joins them:

* the same process under two names: the same pid at the same (communicator, rank), or an IP
  that a log line ties to a hostname (``OOB eth0:10.2.0.4``);
* global ranks: a communicator that holds every process is the world, and its ranks are the
  global ranks; without one, processes are numbered host by host (the topology's host order,
  else natural order of the names) and within a host by CUDA device, else by pid (launchers
  start local ranks in order, so pid order is local-rank order: a guess, logged);
* one name per communicator (``pg``): its ``comm_name`` (NCCL 2.30+) when no other
  communicator uses that name, else its hash in c4's spelling (``0x`` and 16 hex digits).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from diagnosis.nccl.ids import hash_text, inspector_id

log = logging.getLogger(__name__)

__all__ = ["CommInfo", "JobModel", "ProcInfo", "Resolved"]

Proc = tuple[str, int]           # (host as a source names it, pid)
_IP = re.compile(r"^(\d{1,3}\.){3}\d{1,3}$|^[0-9a-fA-F:]+:[0-9a-fA-F:]*$")


def is_address(host: str) -> bool:
    """Whether a host name is an IP address (RAS names nodes by address)."""
    return bool(_IP.match(host))


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders ``node2`` before ``node10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


@dataclass
class ProcInfo:
    """One process (one rank): where it runs and what the sources said about it."""

    host: str
    pid: int
    cuda_dev: int | None = None
    addrs: set[str] = field(default_factory=set)
    nics: tuple[str, ...] = ()
    rank_hint: int | None = None


@dataclass
class CommInfo:
    """One communicator: size, node count, names seen, and members (rank -> process)."""

    hash: int
    nranks: int
    nnodes: int = 0
    names: set[str] = field(default_factory=set)
    members: dict[int, Proc] = field(default_factory=dict)


@dataclass
class Resolved:
    """The reconciled job: each process's global rank, each communicator's name and members
    (global ranks in communicator order; complete ones only), and placements."""

    rank_of: dict[Proc, int]
    pg_of: dict[int, str]
    groups: dict[str, tuple[int, ...]]
    procs: dict[int, ProcInfo]
    canonical: dict[Proc, Proc]
    incomplete: dict[str, tuple[int, int]] = field(default_factory=dict)
    world: str | None = None
    #: IP address -> hostname, as the logs tie them
    aliases: dict[str, str] = field(default_factory=dict)

    def rank(self, host: str, pid: int) -> int | None:
        key = self.canonical.get((host, pid), (host, pid))
        return self.rank_of.get(key)


class JobModel:
    """Accumulates what the sources say; :meth:`resolve` reconciles it."""

    def __init__(self) -> None:
        self.procs: dict[Proc, ProcInfo] = {}
        self.comms: dict[int, CommInfo] = {}
        self.aliases: dict[str, str] = {}          # IP -> hostname
        self._claims: dict[tuple[int, int], set[Proc]] = defaultdict(set)

    # ----- what the sources say -------------------------------------------------------------
    def see_process(self, host: str, pid: int, *, cuda_dev: int | None = None,
                    nics: tuple[str, ...] = (), addr: str | None = None,
                    rank_hint: int | None = None) -> ProcInfo:
        p = self.procs.get((host, pid))
        if p is None:
            p = self.procs[(host, pid)] = ProcInfo(host, pid)
        if cuda_dev is not None and cuda_dev >= 0:
            p.cuda_dev = cuda_dev
        if nics:
            p.nics = nics
        if addr:
            p.addrs.add(addr)
            if not is_address(host):
                self.alias(addr, host)
        if rank_hint is not None:
            p.rank_hint = rank_hint
        return p

    def see_member(self, comm: int, rank: int, nranks: int, host: str, pid: int, *,
                   nnodes: int = 0, name: str | None = None,
                   cuda_dev: int | None = None) -> None:
        """A process holds rank ``rank`` of communicator ``comm`` (of ``nranks``)."""
        self.see_process(host, pid, cuda_dev=cuda_dev)
        c = self.comms.get(comm)
        if c is None:
            c = self.comms[comm] = CommInfo(comm, nranks, nnodes)
        c.nranks = max(c.nranks, nranks)
        c.nnodes = max(c.nnodes, nnodes)
        if name:
            c.names.add(name)
        self._claims[(comm, rank)].add((host, pid))

    def alias(self, addr: str, hostname: str) -> None:
        """An IP address that belongs to ``hostname`` (its OOB interface, from a log line)."""
        self.aliases[addr] = hostname

    # ----- reconciliation -------------------------------------------------------------------
    def resolve(self, host_order: list[str] | None = None, hints_only: bool = False
                ) -> Resolved:
        """Join the names of each process, number the ranks, name the communicators.

        ``host_order``: the topology's hosts, in its order (ranks fill hosts in that order).
        ``hints_only``: number only the processes whose rank a source gave (``rank_hint``:
        the live follower reads it from the process's environment), as a node that sees part
        of the job must, so that every node numbers alike."""
        cut = self._merge_cut_ids()
        canonical = self._join()
        procs: dict[Proc, ProcInfo] = {}
        for key, info in self.procs.items():
            c = canonical[key]
            merged = procs.get(c)
            if merged is None:
                merged = procs[c] = ProcInfo(c[0], c[1])
            if info.cuda_dev is not None:
                merged.cuda_dev = info.cuda_dev
            merged.addrs |= info.addrs
            if is_address(key[0]):
                merged.addrs.add(key[0])
            merged.nics = info.nics or merged.nics
            if info.rank_hint is not None:
                merged.rank_hint = info.rank_hint
        members: dict[int, dict[int, Proc]] = defaultdict(dict)
        for (comm, rank), claimants in self._claims.items():
            owners = {canonical[p] for p in claimants}
            if len(owners) > 1:
                log.warning("communicator %s rank %d is claimed by %d processes (%s): keeping "
                            "the first; the sources may be of different jobs", hash_text(comm),
                            rank, len(owners), ", ".join(f"{h} pid {p}" for h, p in
                                                         sorted(owners)))
            members[comm][rank] = min(owners)
        for comm, ci in self.comms.items():
            ci.members = members.get(comm, {})
        if hints_only:
            rank_of = {k: p.rank_hint for k, p in procs.items() if p.rank_hint is not None}
            world = None
        else:
            rank_of, world = self._ranks(procs, host_order)
        pg_of = self._names()
        groups: dict[str, tuple[int, ...]] = {}
        incomplete: dict[str, tuple[int, int]] = {}
        for comm, ci in self.comms.items():
            pg = pg_of[comm]
            if len(ci.members) == ci.nranks and all(
                    r in ci.members and ci.members[r] in rank_of
                    for r in range(ci.nranks)):
                groups[pg] = tuple(rank_of[ci.members[r]] for r in range(ci.nranks))
            else:
                incomplete[pg] = (len(ci.members), ci.nranks)
        if incomplete and not hints_only:
            pg, (have, want) = next(iter(incomplete.items()))
            log.warning("%d communicators have members no source names (%s: %d of %d): their "
                        "records are left out; give every node's files", len(incomplete), pg,
                        have, want)
        by_rank = {rank_of[k]: v for k, v in procs.items() if k in rank_of}
        # records read from the Inspector still carry its cut hash
        pg_of.update({short: pg_of[full] for short, full in cut.items()})
        return Resolved(rank_of, pg_of, groups, by_rank, canonical, incomplete,
                        pg_of.get(world) if world is not None else None, dict(self.aliases))

    def _merge_cut_ids(self) -> dict[int, int]:
        """Each communicator the Inspector named by its hash's first 14 hex digits, merged into
        the one another source (RAS, the logs) gives the whole hash of, with the same size;
        returns cut hash -> whole hash."""
        cut: dict[int, int] = {}
        for full, info in list(self.comms.items()):
            short = inspector_id(full)
            other = self.comms.get(short)
            if short == full or other is None or other.nranks != info.nranks:
                continue
            cut[short] = full
            del self.comms[short]
            info.nnodes = max(info.nnodes, other.nnodes)
            info.names |= other.names
            # (looked up by rank: a scan of every claim per communicator is quadratic in a
            # job of thousands of communicators)
            for rank in range(other.nranks):
                claimed = self._claims.pop((short, rank), None)
                if claimed:
                    self._claims[(full, rank)] |= claimed
        return cut

    def _join(self) -> dict[Proc, Proc]:
        """Union of the names of one process; the canonical one is a hostname when known."""
        parent: dict[Proc, Proc] = {k: k for k in self.procs}

        def find(x: Proc) -> Proc:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: Proc, b: Proc) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                # the hostname spelling wins over an address
                if is_address(ra[0]) and not is_address(rb[0]):
                    ra, rb = rb, ra
                parent[rb] = ra

        for claimants in self._claims.values():
            by_pid: dict[int, list[Proc]] = defaultdict(list)
            for p in claimants:
                by_pid[p[1]].append(p)
            for same in by_pid.values():
                for p in same[1:]:
                    union(same[0], p)
        short = {_short(h): h for h, _ in self.procs if not is_address(h)}
        for key in list(self.procs):
            host, pid = key
            if is_address(host):
                name = self.aliases.get(host)
                name = short.get(_short(name), name) if name else None
                if name is not None:
                    other = (name, pid)
                    if other not in parent:
                        parent[other] = other
                        self.procs[other] = ProcInfo(name, pid)
                    union(other, key)
            elif _short(host) in short and short[_short(host)] != host:
                other = (short[_short(host)], pid)
                if other in parent:
                    union(other, key)
        return {k: find(k) for k in parent}

    def _ranks(self, procs: dict[Proc, ProcInfo], host_order: list[str] | None
               ) -> tuple[dict[Proc, int], int | None]:
        n = len(procs)
        for comm, info in sorted(self.comms.items(), key=lambda kv: -kv[1].nranks):
            if info.nranks == n and len(info.members) == n:
                return {p: r for r, p in info.members.items()}, comm
            break
        hinted = {k: p.rank_hint for k, p in procs.items() if p.rank_hint is not None}
        if len(hinted) == n and len(set(hinted.values())) == n:
            return dict(hinted), None
        order = {h: i for i, h in enumerate(host_order or [])}
        short_order = {_short(h): i for h, i in order.items()}

        def key(p: Proc) -> tuple[Any, ...]:
            host, pid = p
            at = order.get(host, short_order.get(_short(host)))
            dev = procs[p].cuda_dev
            return (at is None, at if at is not None else 0, natural_key(host),
                    dev is None, dev if dev is not None else 0, pid)

        ranked = sorted(procs, key=key)
        if n > 1 and any(procs[p].cuda_dev is None for p in ranked):
            log.info("no communicator holds all %d processes: ranks numbered host by host, "
                     "and within a host by pid where the CUDA device is unknown", n)
        return {p: r for r, p in enumerate(ranked)}, None

    def _names(self) -> dict[int, str]:
        users: dict[str, int] = defaultdict(int)
        for info in self.comms.values():
            for name in info.names:
                users[name] += 1
        out = {}
        for comm, info in self.comms.items():
            names = sorted(info.names)
            if len(names) == 1 and users[names[0]] == 1:
                out[comm] = names[0]
            else:
                out[comm] = hash_text(comm)
        return out


def _short(host: str) -> str:
    """A host's short name, case-blind (DNS names are)."""
    return host.split(".")[0].lower() if not is_address(host) else host
