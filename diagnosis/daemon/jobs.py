"""The jobs the daemon takes telemetry for, and the limits it holds each to at the door.

A job is *known* once a rank of it registers (records of a job not known are refused:
NOT_FOUND) and stays known until it is removed (``c4 jobs rm``) or ages out (retention). It is
*live* while it has been heard from within ``idle_s``, the time a silent job stays in the live
view. ``max_jobs`` counts live jobs only: jobs that ended long ago never block a new one, and a
restarted daemon counts right (each job's last activity comes from the store). A request that
would make one job too many live is refused with RESOURCE_EXHAUSTED naming that job
(``Rejected.parked_job``): its sidecar holds that job's requests back and retries them later,
while its other jobs flow.

Each live job's memory in the live view is estimated from what it registered: its world size
(per-rank arrays), its ranks, its communicators and their members (each member keeps a window
of call slots: by far the largest part, ~2.5 KiB). A registration that would take one job past
``job_memory_bytes`` is refused for good (FAILED_PRECONDITION: it would never fit); one that
would take the live jobs together past ``live_memory_bytes`` is parked (others may go idle).
Rank ids in a job's registrations and records must lie below its world size, and a job has at
most ``max_groups`` communicators.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import grpc
import numpy as np

from c4.settings import (
    at_least,
    format_duration,
    format_size,
    non_negative,
    parse_duration,
    parse_size,
    positive,
    setting,
    validate,
)
from diagnosis.daemon.errors import Rejected
from diagnosis.errors import ConfigError
from diagnosis.store import (
    BatchRows,
    ConnRows,
    DetailRows,
    GroupRecord,
    OpRows,
    RankRecord,
)
from diagnosis.store.api import Body

log = logging.getLogger(__name__)

# Estimated bytes the live view holds, measured on the engine and the live view (a job of
# rank 1,048,575 held 64 MiB; a communicator of 131,072 ranks 268 MiB; 50 small jobs 21 MiB).
JOB_BYTES = 512 << 10       # a job's engine, budget and bookkeeping
RANK_ID_BYTES = 64          # per rank id below the world size (per-rank arrays)
RANK_BYTES = 400            # per registered rank (placement, names)
GROUP_BYTES = 4 << 10       # per communicator
MEMBER_BYTES = 2560         # per rank of a communicator (its window of call slots)
MIB = 1 << 20

# body type -> its rank columns
_RANK_COLUMNS = {"progress": ("rank", "peer"), "linkstat": ("src", "dst"), "port": ()}


def estimate(world: int, ranks: int, groups: int, members: int) -> int:
    """Bytes a job of this shape is estimated to hold in the live view."""
    return JOB_BYTES + RANK_ID_BYTES * world + RANK_BYTES * ranks + GROUP_BYTES * groups + \
        MEMBER_BYTES * members


def half_the_memory() -> int:
    """Half this machine's physical memory (the default bound of all live jobs together)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 16 << 30


@dataclass(frozen=True)
class JobLimits:
    """The daemon's ``--max-jobs``, ``--job-idle``, ``--max-groups``, ``--job-memory`` and
    ``--live-memory``."""

    max_jobs: int = setting(10_000, flag="--max-jobs", env="C4_MAX_JOBS", check=at_least(1),
                            help="Live jobs (heard from within --job-idle) the daemon follows "
                                 "at once; one more waits: its sidecars hold its telemetry back "
                                 "and resend it later, while their other jobs flow.")
    idle_s: float = setting(1800.0, flag="--job-idle", env="C4_JOB_IDLE", cli_type=str,
                            parse=parse_duration, to_cli=format_duration, check=positive,
                            help="A job silent this long is no longer live: it leaves the live "
                                 "view and stops counting against --max-jobs (e.g. 30m, 2h).")
    #: A job none of whose ranks said it is exiting and that is heard from no more for this
    #: long has failed (its processes were killed, or their nodes lost): its open faults
    #: resolve. (A hung job still speaks: its collectors' stats frames go on.)
    gone_after_s: float = setting(300.0, flag="--job-gone-after", env="C4_JOB_GONE_AFTER",
                                  cli_type=str, parse=parse_duration, to_cli=format_duration,
                                  check=positive,
                                  help="A job none of whose ranks said it is exiting and that "
                                       "is silent this long has failed (killed, or its nodes "
                                       "lost): `c4 jobs` says so and its open faults resolve "
                                       "(e.g. 5m; at most --job-idle).")
    max_groups: int = setting(65_536, flag="--max-groups", env="C4_MAX_GROUPS",
                              check=at_least(1),
                              help="Communicators per job; more are refused.")
    job_memory_bytes: int = setting(4 << 30, flag="--job-memory", env="C4_JOB_MEMORY",
                                    cli_type=str, parse=parse_size, to_cli=format_size,
                                    check=at_least(1),
                                    help="Memory one job may take in the live view (an "
                                         "estimate from its ranks and communicators); a "
                                         "registration past it is refused.")
    #: 0: half this machine's memory
    live_memory_bytes: int = setting(0, flag="--live-memory", env="C4_LIVE_MEMORY",
                                     cli_type=str, parse=parse_size, to_cli=format_size,
                                     check=non_negative,
                                     help="Memory all live jobs together may take "
                                          "(estimated); past it a growing job waits like one "
                                          "over --max-jobs. 0: half this machine's memory.")

    def __post_init__(self) -> None:
        validate(self, ConfigError)
        if not self.live_memory_bytes:
            object.__setattr__(self, "live_memory_bytes", half_the_memory())


@dataclass
class JobEntry:
    """What the door knows of one job: its latest attempt's shape and when it was heard."""

    job: str
    seen_ns: int
    attempt: int = -1
    world: int = 0
    ranks: set[int] = field(default_factory=set)
    groups: dict[str, int] = field(default_factory=dict)   # pg -> members
    members: int = 0
    seeded: bool = True    # its registrations so far are counted (false: known from the store)

    def bytes(self) -> int:
        return estimate(self.world, len(self.ranks), len(self.groups), self.members)


@dataclass
class _Change:
    """What admitting one request does to its job (computed before anything changes)."""

    attempt: int = -1
    reset: bool = False       # a newer attempt: the job's shape starts over
    world: int = 0
    rank: int | None = None
    group: tuple[str, int] | None = None
    bytes: int = 0


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"


class JobBook:
    """Thread-safe: ingest threads admit requests; the retention sweeper and ``c4 jobs rm``
    forget jobs."""

    def __init__(self, limits: JobLimits | None = None, *,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.limits = limits or JobLimits()
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, JobEntry] = {}
        self._live: OrderedDict[str, JobEntry] = OrderedDict()   # least recently heard first
        self._live_bytes = 0
        self.parked = 0       # requests parked for the live-jobs limits
        self.refused = 0      # registrations refused for a job's memory or size

    # -- start-up ---------------------------------------------------------------------------
    def load(self, seen: Mapping[str, int]) -> None:
        """Jobs stored before this daemon started, each with when it was last heard (daemon
        clock, ns): the ones heard within ``idle_s`` are live. Their shape is counted when
        they speak again (``seed``)."""
        now = self._clock()
        with self._lock:
            for job, seen_ns in sorted(seen.items(), key=lambda kv: kv[1]):
                e = self._entries[job] = JobEntry(job, int(seen_ns), seeded=False)
                if now - e.seen_ns < self.limits.idle_s * 1e9:
                    self._live[job] = e
                    self._live_bytes += e.bytes()

    def needs_seed(self, job: str) -> bool:
        with self._lock:
            e = self._entries.get(job)
            return e is not None and not e.seeded

    def seed(self, job: str, ranks: Iterable[RankRecord], groups: Iterable[GroupRecord]
             ) -> None:
        """Count the registrations of a job stored before this daemon started (its latest
        attempt's)."""
        with self._lock:
            e = self._entries.get(job)
            if e is None or e.seeded:
                return
            before = e.bytes()
            for r in ranks:
                if r.attempt > e.attempt:
                    e.attempt, e.world, e.ranks = r.attempt, 0, set()
                if r.attempt == e.attempt:
                    e.world = max(e.world, int(r.world_size))
                    e.ranks.add(int(r.rank))
            for g in groups:
                if g.attempt == e.attempt and g.pg not in e.groups:
                    e.groups[g.pg] = len(g.ranks)
                    e.members += len(g.ranks)
            e.seeded = True
            if job in self._live:
                self._live_bytes += e.bytes() - before

    # -- the door ---------------------------------------------------------------------------
    def admit(self, body: Body, now_ns: int | None = None) -> None:
        """Count ``body`` against its job, or raise ``Rejected`` saying which limit it breaks
        (nothing changes then)."""
        now = self._clock() if now_ns is None else now_ns
        job = body.job
        with self._lock:
            self._expire(now)
            e = self._entries.get(job)
            if e is None:
                if not isinstance(body, RankRecord):
                    raise Rejected(grpc.StatusCode.NOT_FOUND,
                                   f"job {job!r} is unknown: send its RankInfo before its "
                                   "records (or the job was removed, or aged out)")
                e = JobEntry(job, now)
            live = job in self._live
            if not live and len(self._live) >= self.limits.max_jobs:
                self.parked += 1
                raise Rejected(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the daemon already follows {len(self._live):,} live jobs (heard from "
                    f"within {self.limits.idle_s:,.0f} s; its --max-jobs): job {job!r} waits, "
                    "its sidecars resend its telemetry later while their other jobs flow; "
                    "raise --max-jobs, lower --job-idle, or remove ended jobs with "
                    "`c4 jobs rm`", parked_job=job)
            change = self._change(e, body)
            before = e.bytes() if live else 0
            self._check_memory(e, change, before)
            self._commit(e, change, now)
            self._live_bytes += e.bytes() - before

    def _change(self, e: JobEntry, body: Body) -> _Change:
        attempt = int(body.attempt)
        ch = _Change(attempt=max(attempt, e.attempt), world=e.world)
        if attempt < e.attempt:
            return ch                      # an older attempt: stored, not counted
        if attempt > e.attempt:
            ch.reset, ch.world = True, 0
        world = ch.world
        if isinstance(body, RankRecord):
            ch.world = max(world, int(body.world_size))
            ch.rank = int(body.rank)
        elif isinstance(body, GroupRecord):
            top = max(body.ranks)
            if world and top >= world:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                               f"GroupInfo {body.pg!r} lists rank {top}, but job {e.job!r} has "
                               f"{world:,} ranks (its RankInfo.world_size)")
            groups = {} if ch.reset else e.groups
            if body.pg not in groups and len(groups) >= self.limits.max_groups:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION,
                               f"job {e.job!r} already has {len(groups):,} communicators, the "
                               f"most this daemon takes per job (its --max-groups): GroupInfo "
                               f"{body.pg!r} is refused")
            ch.group = (body.pg, len(body.ranks))
        elif world:
            self._check_ranks(e.job, world, body)
        return ch

    @staticmethod
    def _check_ranks(job: str, world: int, body: Body) -> None:
        """Rank ids of a batch below the job's world size."""
        names: tuple[str, ...]
        if isinstance(body, OpRows | DetailRows):
            cols, names = body.cols, ("rank", "peer")
        elif isinstance(body, ConnRows):
            cols, names = body.cols, ("rank",)
        elif isinstance(body, BatchRows):
            cols, names = body.cols, _RANK_COLUMNS.get(body.kind, ())
        else:
            return
        if cols is None or not len(cols):
            return
        for name in names:
            top = int(np.max(cols.columns[name]))
            if top >= world:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                               f"column {name!r} holds rank {top}, but job {job!r} has "
                               f"{world:,} ranks (its RankInfo.world_size)")

    def _after(self, e: JobEntry, ch: _Change) -> int:
        ranks = 0 if ch.reset else len(e.ranks)
        groups = {} if ch.reset else e.groups
        members = 0 if ch.reset else e.members
        if ch.rank is not None and (ch.reset or ch.rank not in e.ranks):
            ranks += 1
        n_groups = len(groups)
        if ch.group is not None:
            pg, size = ch.group
            members += size - groups.get(pg, 0)
            n_groups += pg not in groups
        return estimate(ch.world, ranks, n_groups, members)

    def _check_memory(self, e: JobEntry, ch: _Change, before: int) -> None:
        after = self._after(e, ch)
        ch.bytes = after
        if after > e.bytes() and after > self.limits.job_memory_bytes:
            self.refused += 1
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION,
                           f"job {e.job!r} would need about {_mib(after)} in the live view "
                           f"({ch.world:,} ranks, communicators of {self._members(e, ch):,} "
                           f"members in all), over this daemon's --job-memory of "
                           f"{_mib(self.limits.job_memory_bytes)}: refused; raise --job-memory")
        total = self._live_bytes - before + after
        if after > before and total > self.limits.live_memory_bytes:
            self.parked += 1
            raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"the live jobs would need about {_mib(total)} together, over this "
                           f"daemon's --live-memory of {_mib(self.limits.live_memory_bytes)}: "
                           f"job {e.job!r} waits (its sidecars resend later) until other jobs "
                           "go idle; raise --live-memory or remove ended jobs",
                           parked_job=e.job)

    @staticmethod
    def _members(e: JobEntry, ch: _Change) -> int:
        members = 0 if ch.reset else e.members
        if ch.group is not None:
            members += ch.group[1] - (0 if ch.reset else e.groups.get(ch.group[0], 0))
        return members

    def _commit(self, e: JobEntry, ch: _Change, now: int) -> None:
        if ch.reset:
            e.ranks, e.groups, e.members = set(), {}, 0
        e.attempt = ch.attempt
        if ch.rank is not None or ch.group is not None or ch.reset:
            e.world = ch.world
        if ch.rank is not None:
            e.ranks.add(ch.rank)
        if ch.group is not None:
            pg, size = ch.group
            e.members += size - e.groups.get(pg, 0)
            e.groups[pg] = size
        e.seen_ns = max(e.seen_ns, now)
        self._entries[e.job] = e
        self._live[e.job] = e
        self._live.move_to_end(e.job)

    def _expire(self, now: int) -> None:
        """Jobs silent for ``idle_s`` stop being live (lock held)."""
        cutoff = now - int(self.limits.idle_s * 1e9)
        while self._live:
            job, e = next(iter(self._live.items()))
            if e.seen_ns >= cutoff:
                return
            del self._live[job]
            self._live_bytes -= e.bytes()

    # -- forgetting -------------------------------------------------------------------------
    def remove(self, job: str) -> bool:
        """Forget a job (removed or aged out); returns whether it was known."""
        with self._lock:
            e = self._entries.pop(job, None)
            if e is None:
                return False
            if self._live.pop(job, None) is not None:
                self._live_bytes -= e.bytes()
            return True

    # -- readings ---------------------------------------------------------------------------
    def known(self) -> int:
        with self._lock:
            return len(self._entries)

    def live(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._live)

    def live_bytes(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return self._live_bytes

    def job_bytes(self, job: str) -> int:
        with self._lock:
            e = self._entries.get(job)
            return e.bytes() if e is not None else 0
