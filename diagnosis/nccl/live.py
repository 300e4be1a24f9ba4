"""NCCL's telemetry on a live node, as records to ship: the hook a sidecar calls.

:class:`NcclNode` follows the node's Inspector dump directory (:mod:`follow`) and polls RAS
(:mod:`ras_client`), reconciles what they say and, at each :meth:`NcclNode.step`, returns what
is new as c4's records (:class:`NcclRecords`): ranks, communicator members, op rows (completed
calls; failed rows for ranks RAS lost), and progress (the calls RAS says ranks are inside)::

    node = NcclNode(inspector_dir="/scratch/job/nccl-inspector", ras=RasPoller(),
                    rank_of=environ_rank, skip=lambda host, pid: pid in hooked_pids)
    while running:                              # e.g. in the sidecar's tick, every second
        recs = node.step()
        for msg in recs.messages(job, attempt):   # RankInfo, GroupInfo, OpBatch
            outbox.put(msg)                        # as collector records are shipped

What a node cannot do alone, and this module leaves to whoever sees every node:

* global ranks come from each process's environment (``RANK``, set by torchrun and most
  launchers; :func:`environ_rank` reads ``/proc/<pid>/environ``); a process without one is
  held back (counted in ``NcclRecords.unranked``);
* a communicator spans nodes, so a node knows only its own members: it ships them as parts
  of the group (``GroupInfo`` with ``size`` and ``positions``), which the daemon joins once
  every node's are in (``diagnosis.daemon.group_parts``), and repeats them now and then
  (:meth:`NcclNode.parts`); a group whose members are all on this node is shipped as a group
  record at once;
* ``progress`` (the calls RAS says ranks are inside) goes out as a ``ProgressBatch`` marked
  ``completed_only``: the Inspector writes finished calls only, so the daemon's engine takes
  the calls a rank is inside from it (``Engine.add_progress(..., fill_open=True)``).

A job can run c4's torch hook and the Inspector both: ``skip`` names the processes whose calls
the hook already ships, and their Inspector rows are dropped (one source per process, no
duplicates).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from c4.proto.codec import Columns, concat
from diagnosis.engine.records import ProgressRecords
from diagnosis.nccl.convert import OpConverter
from diagnosis.nccl.follow import InspectorFollower
from diagnosis.nccl.job import JobModel, Resolved
from diagnosis.nccl.observe import observe_ops
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.ras import RasSnapshot
from diagnosis.nccl.ras_client import RasPoller
from diagnosis.nccl.ras_progress import RasFeed
from diagnosis.nccl.records import NcclOps

log = logging.getLogger(__name__)

_HOLD_ROWS = 1_000_000      # rows held for processes whose rank is not known yet

__all__ = ["GroupAssembler", "NcclNode", "NcclRecords", "environ_int", "environ_rank",
           "environ_world", "local_addresses"]


def environ_int(pid: int, name: str, proc_root: str = "/proc") -> int | None:
    """An integer a launcher put in the process's environment (``RANK``, ``WORLD_SIZE``)."""
    try:
        raw = Path(proc_root, str(pid), "environ").read_bytes()
    except OSError:
        return None
    key = name.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(key):
            try:
                return int(item[len(key):])
            except ValueError:
                return None
    return None


def environ_rank(pid: int, proc_root: str = "/proc") -> int | None:
    """The global rank a launcher gave the process (``RANK`` in its environment), if any."""
    return environ_int(pid, "RANK", proc_root)


def environ_world(pid: int, proc_root: str = "/proc") -> int | None:
    """The job's size as the launcher told the process (``WORLD_SIZE``), if it did."""
    return environ_int(pid, "WORLD_SIZE", proc_root)


def local_addresses() -> set[str]:
    """This node's names and addresses (RAS names nodes by address)."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            names.add(str(info[4][0]))
    except OSError:
        pass
    return names


@dataclass
class NcclRecords:
    """What one step found: new ranks (rank, host, pid, gpu, nic), communicator members
    (pg, size, rank in it, global rank), complete groups, op rows, progress."""

    ranks: list[tuple[int, str, int, str | None, str | None]] = field(default_factory=list)
    members: list[tuple[str, int, int, int]] = field(default_factory=list)
    groups: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    ops: Columns | None = None
    progress: ProgressRecords | None = None
    unranked: int = 0
    #: the job's size as far as this node knows it (launcher's WORLD_SIZE, else the largest
    #: communicator, else the highest rank + 1)
    world_size: int = 0

    def __len__(self) -> int:
        return (len(self.ranks) + len(self.members) + len(self.groups)
                + (len(self.ops) if self.ops is not None else 0)
                + (len(self.progress) if self.progress is not None else 0))

    def messages(self, job: str, attempt: int = 0) -> list[Any]:
        """The records as ingest messages (``c4.proto.c4_pb2`` RankInfo, GroupInfo, OpBatch,
        ProgressBatch), in the order the daemon needs them: ranks and groups before the rows
        that use them."""
        from c4.proto import c4_pb2
        from c4.proto.codec import PROGRESS_COLUMNS, encode_ops, encode_progress

        out: list[Any] = [c4_pb2.RankInfo(job=job, attempt=attempt, rank=r,
                                          world_size=max(self.world_size, r + 1), host=h,
                                          pid=p, gpu=g or "", nic=n or "", backend="nccl")
                          for r, h, p, g, n in self.ranks]
        out += [c4_pb2.GroupInfo(job=job, attempt=attempt, pg=pg, ranks=list(ranks))
                for pg, ranks in self.groups]
        # members of communicators this node cannot complete alone: parts the daemon joins
        whole = {pg for pg, _ in self.groups}
        parts: dict[str, tuple[int, list[int], list[int]]] = {}
        for pg, size, pos, g in self.members:
            if pg not in whole:
                part = parts.setdefault(pg, (size, [], []))
                part[1].append(pos)
                part[2].append(g)
        out += [c4_pb2.GroupInfo(job=job, attempt=attempt, pg=pg, size=size, positions=pos,
                                 ranks=ranks) for pg, (size, pos, ranks) in parts.items()]
        if self.ops is not None and len(self.ops):
            out.append(encode_ops(job, self.ops, attempt))
        p = self.progress
        if p is not None and len(p):
            cols = Columns({k: np.asarray(getattr(p, k)).astype(dt)
                            for k, dt in PROGRESS_COLUMNS.items()}, list(p.strings))
            msg = encode_progress(job, cols, attempt)
            msg.completed_only = True
            out.append(msg)
        return out


@dataclass
class GroupAssembler:
    """Members of communicators as nodes report them -> complete groups, once each."""

    sizes: dict[str, int] = field(default_factory=dict)
    members: dict[str, dict[int, int]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    def add(self, members: Iterable[tuple[str, int, int, int]]) -> list[tuple[str, tuple]]:
        """Take (pg, size, rank in it, global rank) facts; return the groups they complete."""
        out = []
        for pg, size, rank, g in members:
            self.sizes[pg] = max(self.sizes.get(pg, 0), size)
            self.members.setdefault(pg, {})[rank] = g
            m = self.members[pg]
            if pg not in self.done and len(m) == self.sizes[pg] and all(
                    r in m for r in range(self.sizes[pg])):
                self.done.add(pg)
                out.append((pg, tuple(m[r] for r in range(self.sizes[pg]))))
        return out

    def partial(self) -> dict[str, np.ndarray]:
        """Per communicator, global rank by communicator rank (-1: not reported yet)."""
        out = {}
        for pg, m in self.members.items():
            arr = np.full(self.sizes[pg], -1, dtype=np.int64)
            for r, g in m.items():
                if 0 <= r < len(arr):
                    arr[r] = g
            out[pg] = arr
        return out


@dataclass
class NcclNode:
    """The node's NCCL telemetry, followed and reconciled; :meth:`step` returns what is new."""

    inspector_dir: str | Path | None = None
    ras: RasPoller | None = None
    rank_of: Callable[[int], int | None] = environ_rank
    world_of: Callable[[int], int | None] = environ_world
    skip: Callable[[str, int], bool] = field(default=lambda host, pid: False)
    hosts: set[str] = field(default_factory=local_addresses)
    problems: Problems = field(default_factory=Problems)
    follower: InspectorFollower | None = None
    model: JobModel = field(default_factory=JobModel)
    assembler: GroupAssembler = field(default_factory=GroupAssembler)
    _converter: OpConverter | None = None
    _resolved: Resolved | None = None
    _known: set[tuple] = field(default_factory=set)
    _sent_ranks: set[int] = field(default_factory=set)
    _held: list[NcclOps] = field(default_factory=list)
    _feed: RasFeed | None = None
    world_size: int = 0

    def __post_init__(self) -> None:
        if self.follower is None and self.inspector_dir is not None:
            self.follower = InspectorFollower(Path(self.inspector_dir), self.problems)

    def step(self) -> NcclRecords:
        """Read what is new and return it as c4's records."""
        out = NcclRecords()
        batches = self.follower.poll() if self.follower is not None else []
        snaps = [self._local(s) for s in self.ras.poll()] if self.ras is not None else []
        changed = False
        for b in batches:
            # every process's membership counts, also of those whose rows the hook ships:
            # a communicator's group is complete only with all its members
            before = len(self.model.procs), sum(len(c.members) for c in self.model.comms.values())
            observe_ops(self.model, b)
            changed |= (len(self.model.procs),
                        sum(len(c.members) for c in self.model.comms.values())) != before
        batches = [b for b in (self._skip(b) for b in self._held + batches) if len(b)]
        for s in snaps:
            for c in s.comms:
                for r in c.ranks:
                    self.model.see_member(c.hash, r.rank, c.size, r.host, r.pid,
                                          cuda_dev=r.cuda_dev)
            changed = True
        if changed or self._resolved is None:
            self._resolve(out)
        assert self._converter is not None and self._resolved is not None
        self._held = []
        parts = []
        ready = []
        for b in batches:
            unranked = np.asarray([self._resolved.rank(h, p) is None for h, p in b.procs]
                                  or [False])[b.proc]
            if unranked.any():
                out.unranked += int(unranked.sum())
                if sum(len(h) for h in self._held) + len(b) <= _HOLD_ROWS:
                    self._held.append(b)      # until the process's rank is known
                else:
                    self.problems.add(b.source, None, "unranked", "rows of a process whose "
                                      "global rank is unknown (no RANK in its environment): "
                                      "dropped")
                continue
            ready.append(b)
        # every file's rows in one conversion: its cost is mostly per batch, not per row
        cols = self._converter.convert(NcclOps.concat(ready)) if ready else None
        if cols is not None:
            parts.append(cols)
        feed = self._feed
        if feed is None or feed.resolved is not self._resolved:
            feed = self._feed = RasFeed(self._resolved, self._converter.frontiers,
                                        self.problems, self._converter.history,
                                        _missing=feed._missing if feed else {},
                                        _open_p2p=feed._open_p2p if feed else set())
        progress = []
        for s in snaps:
            rows = feed.rows(s)
            if rows is not None:
                if rows.progress is not None:
                    progress.append(rows.progress)
                if rows.errors is not None:
                    parts.append(rows.errors)
                if rows.open_p2p is not None:
                    parts.append(rows.open_p2p)
        out.ops = concat(parts) if parts else None
        out.progress = _join_progress(progress)
        return out

    def learn_group(self, pg: str, ranks: tuple[int, ...]) -> None:
        """A communicator's whole membership, from the daemon that joined every node's parts:
        sends and receives to members on other nodes get their peer's global rank from now
        on, and this node's part is no longer repeated."""
        self.assembler.add([(pg, len(ranks), i, g) for i, g in enumerate(ranks)])
        if self._converter is not None:
            self._converter.members.update(self.assembler.partial())

    def parts(self) -> NcclRecords:
        """Every member this node knows of the communicators it cannot complete alone, to
        ship again (a daemon that restarted before their groups were whole lost them)."""
        a = self.assembler
        return NcclRecords(members=[(pg, a.sizes[pg], pos, g)
                                    for pg, m in a.members.items() if pg not in a.done
                                    for pos, g in sorted(m.items())])

    def _skip(self, b: NcclOps) -> NcclOps:
        """The rows of processes the torch hook does not already report."""
        drop = [self.skip(h, p) for h, p in b.procs]
        if not any(drop):
            return b
        keep = ~np.asarray(drop)[b.proc]
        return _take(b, keep)

    def _local(self, s: RasSnapshot) -> RasSnapshot:
        """RAS answers for the whole job: keep this node's ranks (each node ships its own)."""
        from dataclasses import replace

        comms = tuple(replace(c, ranks=tuple(r for r in c.ranks if r.host in self.hosts),
                              missing=tuple(m for m in c.missing if m.host in self.hosts))
                      for c in s.comms)
        return replace(s, comms=comms)

    def _resolve(self, out: NcclRecords) -> None:
        for key, p in self.model.procs.items():
            if p.rank_hint is None:
                hint = self.rank_of(key[1])
                if hint is not None:
                    p.rank_hint = hint
        self._resolved = r = self.model.resolve(hints_only=True)
        if self._converter is None:
            self._converter = OpConverter(r, require_groups=False,
                                          members=self.assembler.partial())
        self._converter.r = r
        worlds = [self.world_of(p.pid) for p in r.procs.values()]
        self.world_size = max([w for w in worlds if w] + [self.world_size]
                              + [c.nranks for c in self.model.comms.values()]
                              + [rank + 1 for rank in r.procs])
        for rank, p in sorted(r.procs.items()):
            if rank not in self._sent_ranks and not self.skip(p.host, p.pid):
                # a hooked process's hook sends its own rank record
                self._sent_ranks.add(rank)
                out.ranks.append((rank, p.host, p.pid, None, None))
        out.world_size = self.world_size
        facts = []
        for comm, info in self.model.comms.items():
            pg = r.pg_of[comm]
            for crank, proc in info.members.items():
                g = r.rank_of.get(proc)
                member = (pg, crank, g)
                if g is not None and member not in self._known:
                    self._known.add(member)
                    facts.append((pg, info.nranks, crank, g))
        out.members += facts
        out.groups += self.assembler.add(facts)
        self._converter.members.update(self.assembler.partial())


def _take(b: NcclOps, keep: np.ndarray) -> NcclOps:
    from dataclasses import replace

    cols = {name: getattr(b, name)[keep] for name in ("proc", "comm", "op", "sn", "peer",
                                                     "msg_bytes", "exec_us", "dump_us",
                                                     "start_us", "kstart_us", "kstop_us",
                                                     "line", "busbw")}
    return replace(b, **cols)


def _join_progress(parts: list[ProgressRecords]) -> ProgressRecords | None:
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    rows: dict[str, list] = {k: [] for k in ("rank", "pg", "t", "entered", "completed")}
    for p in parts:
        for i in range(len(p)):
            rows["rank"].append(int(p.rank[i]))
            rows["pg"].append(p.strings[int(p.pg[i])])
            rows["t"].append(int(p.t_ns[i]))
            rows["entered"].append(int(p.entered[i]) if p.entered[i] >= 0 else None)
            rows["completed"].append(int(p.completed[i]) if p.completed[i] >= 0 else None)
    return ProgressRecords.build(rows["rank"], rows["pg"], rows["t"], rows["entered"],
                                 rows["completed"])
