"""Communicators known in parts: every node's sidecar ships the members it sees, the daemon
joins them into one group record once every position is filled.

A sidecar reading NCCL's own telemetry (the Inspector's files, RAS) sees only its node's members
of a communicator that spans nodes. It ships them as a ``GroupInfo`` with ``size`` and
``positions`` set (a part); :class:`GroupParts` keeps the parts of each (job, attempt,
communicator) until all ``size`` positions are known, then hands back the whole group, which is
stored and registered like any group record, and sent back down the job's streams: a node
that knows only its part learns every member (the peer of a send on another node). A part of a
group already joined is answered with the group on its own stream (a sidecar that restarted).
Parts are kept in memory only: sidecars repeat theirs now and then, so a daemon that restarts
before a group is whole learns them again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import grpc

from c4.proto import c4_pb2
from diagnosis.daemon.errors import Rejected

__all__ = ["GroupParts"]

#: positions held across every unfinished group: a bound on what parts that never complete
#: (a node that never reports, a mistyped size) can hold in memory
MAX_POSITIONS = 4_000_000
#: members of joined communicators remembered (the oldest forgotten first: the parts of one
#: forgotten, repeated by every node, join it again: a repeated group record, which
#: registering takes as it is)
MAX_JOINED_RANKS = 4_000_000


@dataclass
class _Pending:
    size: int
    desc: str
    at: dict[int, int] = field(default_factory=dict)     # position -> global rank


class GroupParts:
    """Joins communicator parts (``GroupInfo`` with ``size``) into whole groups."""

    def __init__(self, max_ranks: int, max_positions: int = MAX_POSITIONS) -> None:
        self._max_ranks = max_ranks
        self._max_positions = max_positions
        self._pending: dict[tuple[str, int, str], _Pending] = {}
        self._joined: OrderedDict[tuple[str, int, str], c4_pb2.GroupInfo] = OrderedDict()
        self._joined_ranks = 0
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def is_part(g: c4_pb2.GroupInfo) -> bool:
        return g.size > 0 or len(g.positions) > 0

    def add(self, g: c4_pb2.GroupInfo) -> tuple[c4_pb2.GroupInfo, bool] | None:
        """Take one part: None while its group is not whole, else the group and whether
        this part completed it (False: joined before). Raises ``Rejected`` for a part that
        contradicts itself or what other nodes said."""
        self._check(g)
        key = (g.job, g.attempt, g.pg)
        with self._lock:
            known = self._joined.get(key)
            if known is not None:
                return known, False
            p = self._pending.get(key) or _Pending(g.size, g.desc)
            if p.size != g.size:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                               f"GroupInfo part of {g.pg!r} says the communicator has "
                               f"{g.size} ranks; another node's part said {p.size}: check "
                               "that both nodes read the same job")
            clash = [(pos, p.at[pos], r) for pos, r in zip(g.positions, g.ranks, strict=True)
                     if p.at.get(pos, r) != r]
            if clash:
                pos, old, new = clash[0]
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                               f"GroupInfo part of {g.pg!r} puts rank {new} at position {pos}, "
                               f"which another part gave rank {old}: check the ranks' RANK "
                               "(each process's global rank)")
            new = sum(1 for pos in g.positions if pos not in p.at)
            # (a part that completes its group frees what it adds at once)
            if self._held + new > self._max_positions and len(p.at) + new < p.size:
                raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"the daemon holds {self._held:,} positions of communicators "
                               "not yet complete (its limit): a part of "
                               f"{g.pg!r} is refused until more groups complete; retry later")
            self._pending[key] = p
            p.at.update(zip(g.positions, g.ranks, strict=True))
            self._held += new
            p.desc = p.desc or g.desc
            if len(p.at) < p.size:
                return None
            del self._pending[key]
            self._held -= len(p.at)
            whole = c4_pb2.GroupInfo(job=g.job, attempt=g.attempt, pg=g.pg,
                                     ranks=[p.at[i] for i in range(p.size)], desc=p.desc)
            self._remember(key, whole)
        return whole, True

    def _remember(self, key: tuple[str, int, str], g: c4_pb2.GroupInfo) -> None:
        old = self._joined.pop(key, None)
        if old is not None:
            self._joined_ranks -= len(old.ranks)
        self._joined[key] = g
        self._joined_ranks += len(g.ranks)
        while self._joined_ranks > MAX_JOINED_RANKS and len(self._joined) > 1:
            _, gone = self._joined.popitem(last=False)
            self._joined_ranks -= len(gone.ranks)

    def whole(self, g: c4_pb2.GroupInfo) -> None:
        """A group record that came whole (a node that saw every member once the others
        were shipped as parts): its parts are no longer waited for."""
        key = (g.job, g.attempt, g.pg)
        with self._lock:
            p = self._pending.pop(key, None)
            if p is not None:
                self._held -= len(p.at)
            if p is not None or key in self._joined:
                self._remember(key, g)

    def forget(self, g: c4_pb2.GroupInfo) -> None:
        """A joined group the daemon refused (it repeats a rank): join it again from new
        parts."""
        with self._lock:
            old = self._joined.pop((g.job, g.attempt, g.pg), None)
            if old is not None:
                self._joined_ranks -= len(old.ranks)

    def pending(self) -> int:
        """Communicators with some parts and not yet whole."""
        with self._lock:
            return len(self._pending)

    def _check(self, g: c4_pb2.GroupInfo) -> None:
        def need(cond: bool, message: str) -> None:
            if not cond:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, message)

        need(bool(g.job), "GroupInfo.job is empty")
        need(bool(g.pg), "GroupInfo.pg is empty")
        need(0 < g.size <= self._max_ranks,
             f"GroupInfo part of {g.pg!r} has size {g.size}: a part needs its communicator's "
             f"size, 1 to {self._max_ranks:,} (the daemon's --max-ranks)")
        need(len(g.positions) == len(g.ranks) > 0,
             f"GroupInfo part of {g.pg!r} has {len(g.ranks)} ranks and {len(g.positions)} "
             "positions: give each rank its position in the communicator")
        need(all(0 <= pos < g.size for pos in g.positions),
             f"GroupInfo part of {g.pg!r} has a position outside 0..{g.size - 1}")
        need(len(set(g.positions)) == len(g.positions),
             f"GroupInfo part of {g.pg!r} repeats a position")
        need(min(g.ranks) >= 0, f"GroupInfo part of {g.pg!r} lists a negative rank")
