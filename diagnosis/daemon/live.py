"""The daemon's live view of each job: registered ranks and groups, recent telemetry, and the
detection engine that runs on it. Fed only with writes that were stored for the first time.

The writer hands stored writes over and goes on acknowledging: the detectors run in their own
thread (``run``), which applies the backlog and analyses every job once per interval, so a long
analysis pass never holds up acknowledgements. Memory is bounded: the backlog holds at most
``max_backlog_records`` (past it the writer waits, which pushes back on the sidecars), each
job's engine keeps a bounded window, and a job silent for ``idle_s`` leaves the view (it is
rebuilt from the store's registrations if it speaks again).

Isolation: each job's records are applied and analysed apart. A failure in one job's part
(applying a write, its heartbeats, its budget, a pass of its detectors, filing its reports) is
counted (``problems``), logged at most once per interval per job, and touches no other job: the
rest of the group commit is applied, every other job analysed.

Lag: the age of the oldest stored write whose records the detectors have not finished judging
(waiting in the backlog, or applied but not yet through a completed analysis pass). With the
detectors keeping up it stays near the analysis interval plus one pass; it grows when they fall
behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import Histogram

from c4.proto import c4_pb2
from c4.proto.codec import concat
from c4.proto.health import HealthRecord
from c4.ratelog import RateLimitedLog
from c4.reduce.sampling import take
from c4.report import FaultReport
from diagnosis.daemon.batches import port_records, progress_records
from diagnosis.daemon.budget import BudgetConfig, JobBudget
from diagnosis.daemon.channels import Channels
from diagnosis.daemon.control import ControlHub
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.heap import HeapKeeper
from diagnosis.daemon.heartbeats import Heartbeats
from diagnosis.daemon.hosts import HostBook
from diagnosis.daemon.links import ConnResolver
from diagnosis.daemon.linkstats import LinkStatResolver
from diagnosis.daemon.scheduling import Governor, Load, Schedules
from diagnosis.daemon.writer import LATENCY_BUCKETS
from diagnosis.engine import Engine, EngineConfig
from diagnosis.health.live import LiveHealth
from diagnosis.store import (
    BatchRows,
    ConnRows,
    GroupRecord,
    OpRows,
    RankRecord,
    Store,
    Write,
)
from diagnosis.trace.order import op_visible_ns

if TYPE_CHECKING:
    from c4.topology import Topology
    from c4.topology.job import JobTopology

log = logging.getLogger(__name__)

# Records applied between two checks of the analysis clock, so a deep backlog cannot postpone
# an analysis pass by more than a moment.
APPLY_CHUNK = 200_000
# stored commits applied to the engines at once, at most
_APPLY_COMMITS = 64
# Evicted jobs remembered, so that a job speaking again is rebuilt from the store.
MAX_EVICTED = 4096


@dataclass
class JobState:
    job: str
    attempt: int
    engine: Engine
    ranks: dict[int, RankRecord] = field(default_factory=dict)
    groups: dict[str, GroupRecord] = field(default_factory=dict)
    records: int = 0
    last_ns: int = 0
    links: ConnResolver = field(default_factory=ConnResolver)
    heard: float = field(default_factory=time.monotonic)  # last write applied (monotonic)
    budget: JobBudget = field(default_factory=lambda: JobBudget(BudgetConfig()))
    linkstats: LinkStatResolver = field(default_factory=LinkStatResolver)
    reduced: bool = False      # its sampling factor has been above 1
    ranks_version: int = 0     # bumped by every registration: its topology is assembled again
    topo_key: tuple[int, int] = (-1, -1)    # (ranks_version, host book generation) assembled
    topology: JobTopology | None = None   # once assembled
    topo_hosts: tuple[frozenset[str], int] | None = None   # (hosts, generation) it joined
    topo_pass_version: int = -1    # ranks_version at the last pass that looked at its hosts
    ended: bool = False        # every rank said it is exiting, or it went silent for good
    #: it ended by going silent (told to ``on_job_end`` with the silence): if it speaks again,
    #: it was not gone
    gone: bool = False
    #: last sign of life (monotonic): a write applied, or a collector's stats frame newer than
    #: any before (a hung job writes nothing, but its collectors still beat)
    alive: float = field(default_factory=time.monotonic)
    beat_ns: int = 0            # the newest collector stats frame time seen
    channels: Channels = field(default_factory=Channels)   # which sidecar carries each rank
    #: (ranks_version, the registered ranks sorted, where each runs), taken again after a
    #: registration: every pass needs them, and a 100k-rank job's dicts take a while to walk
    roster: tuple[int, np.ndarray, dict[int, tuple[str, ...]]] = (-1, np.empty(0, np.int64), {})


def _all_left(st: JobState) -> bool:
    """Every rank of the attempt registered and said it is exiting."""
    if not st.ranks or len(st.engine.leaving) < len(st.ranks):
        return False
    world = max(r.world_size for r in st.ranks.values())
    return len(st.ranks) >= world and set(st.ranks) <= st.engine.leaving


def _run_key(body: object) -> tuple | None:
    """What a write shares with those it may be applied together with (None: nothing)."""
    if isinstance(body, OpRows):
        return ("ops", body.job, body.attempt)
    if isinstance(body, BatchRows) and body.cols is not None \
            and body.kind in ("progress", "linkstat"):
        return (body.kind, body.job, body.attempt, body.completed_only)
    return None


def _runs(writes: list[Write]) -> list[list[Write]]:
    """The writes the engines analyse, in order: each job attempt's op batches that come one
    after the other as one run, and likewise its progress and its linkstat batches (its
    engine takes each run as one batch: each batch costs it a fixed share of work whatever its
    size, which a job of a thousand nodes, a batch per node and request, would otherwise pay
    a thousand times a second), every other write alone. Detail records are left out: stored
    for the reports, not analysed again."""
    runs: list[list[Write]] = []
    last: tuple | None = None
    for w in writes:
        if not isinstance(w.body, RankRecord | GroupRecord | OpRows | ConnRows | BatchRows):
            continue
        key = _run_key(w.body)
        if key is not None and key == last:
            runs[-1].append(w)
        else:
            runs.append([w])
        last = key
    return runs


def _newest(body: object) -> int:
    """The newest record time a write holds (-1: none, a registration)."""
    if isinstance(body, OpRows) and len(body.cols):
        return int(np.max(body.cols["t_enter_ns"]))
    if isinstance(body, BatchRows) and body.count:
        return int(body.t_hi)
    return -1


def _roster(st: JobState) -> tuple[int, np.ndarray, dict[int, tuple[str, ...]]]:
    if st.roster[0] != st.ranks_version:
        st.roster = (st.ranks_version, np.array(sorted(st.ranks), np.int64),
                     {r: tuple(p for p in (rec.host, rec.gpu, rec.nic) if p)
                      for r, rec in st.ranks.items()})
    return st.roster


def _places(st: JobState) -> dict[int, tuple[str, ...]]:
    """Where each rank of a job runs: (host, gpu, nic) topology ids, as registered."""
    return _roster(st)[2]


def _registered(st: JobState, ranks: np.ndarray) -> np.ndarray:
    """Which of ``ranks`` (int64) have registered."""
    known = _roster(st)[1]
    if not len(known):
        return np.zeros(len(ranks), bool)
    at = np.minimum(np.searchsorted(known, ranks), len(known) - 1)
    return known[at] == ranks


def records_of(w: Write) -> int:
    """Rows a write carries (1 for a registration): the unit of the daemon's memory bounds."""
    cols = getattr(w.body, "cols", None)
    return len(cols) if cols is not None else 1


def top_seqs(pg: np.ndarray, seq: np.ndarray, strings: list[str]) -> dict[str, int]:
    """The highest seq per communicator name in a batch (``pg`` indexes ``strings``)."""
    if not len(pg):
        return {}
    top = np.full(len(strings), -1, np.int64)
    np.maximum.at(top, np.asarray(pg, dtype=np.int64), np.asarray(seq, dtype=np.int64))
    return {strings[i]: int(top[i]) for i in np.flatnonzero(top >= 0).tolist()}


# Names (communicators and ops) one job's detectors keep; a job of 65,536 communicators (the
# default --max-groups) and a few dozen op names stays far below.
MAX_JOB_NAMES = 262_144


class _TooManyNames(Exception):
    """A job's name tables are full: its op records are not analysed."""


class LiveView:
    def __init__(self, hub: FaultHub, *, topology: Topology | None = None,
                 store: Store | None = None,
                 max_backlog_records: int = 1_000_000, idle_s: float = 1800.0,
                 gone_after_s: float = 300.0,
                 budget: BudgetConfig | None = None, control: ControlHub | None = None,
                 max_job_names: int = MAX_JOB_NAMES, hosts: HostBook | None = None,
                 topology_source: str = "", interval_s: float = 1.0,
                 heap: HeapKeeper | None = None) -> None:
        self._hub = hub
        self._heap = heap      # frozen and thawed between passes (see diagnosis/daemon/heap)
        self._engine_config = EngineConfig.analysed_every(interval_s)
        self.max_job_names = max_job_names
        self._hosts = hosts     # the hosts' discovered internals: each job's topology
        self._topology_source = topology_source
        self._budget = budget or BudgetConfig(records_per_s=0)
        self._control = control
        self.governor = Governor()
        #: records received and not yet stored (the writer's queue), for the governor
        self.upstream: Callable[[], int] | None = None
        #: rows the store committed and the seconds it took (the writer's), for the governor
        self.stored: Callable[[], tuple[int, float]] | None = None
        self.schedules = Schedules(store, control)
        self._topology = topology
        self._store = store
        self._max_backlog = max_backlog_records
        self._idle_s = idle_s
        # (ended before it leaves the view: the view forgets jobs silent for ``idle_s``)
        self._gone_after_s = min(gone_after_s, idle_s)
        #: every pass of the detectors (``component_metrics``)
        self.analysis_seconds = Histogram(
            "c4_daemon_analysis_seconds",
            "Duration of one pass of the live detectors over every job.",
            buckets=(*LATENCY_BUCKETS, 30.0, 60.0), registry=None)
        self._jobs: dict[tuple[str, int], JobState] = {}
        self._evicted: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()  # the jobs and their engines
        self._cond = threading.Condition()  # the backlog and the lag bookkeeping
        self._backlog: deque[tuple[float, list[Write], int]] = deque()
        self._backlog_records = 0
        self._unjudged_since: float | None = None  # oldest write applied since the last pass
        self._judging_since: float | None = None   # oldest write the running pass covers
        self._closed = False
        # (time, records) of recent stored batches, for the ingest rate
        self._rate: deque[tuple[float, int]] = deque(maxlen=4096)
        self.records_total = 0
        self.records_applied = 0
        # seconds the detectors' thread spent applying records and in passes (the governor
        # measures the daemon's capacity from them)
        self.apply_s = 0.0
        self.analysis_s = 0.0
        # the collectors' signs of life, for the next pass
        self._heartbeats = Heartbeats()
        self.backpressure_s = 0.0  # time the writer waited for the detectors
        self.last_analysis_s = 0.0
        # failures kept inside one job's analysis, by stage (apply, heard, budget, advance, file)
        self.problems: dict[str, int] = {}
        self._rated = RateLimitedLog(log)
        # (job, attempt, when, silent_s): every rank of the attempt said it is exiting
        # (silent_s None), or it has not been heard from for silent_s seconds (since ``when``)
        # without a word of leaving; called from the detectors' thread, outside the view's lock
        self.on_job_end: Callable[..., object] | None = None
        # (job, attempt): an attempt the view had not seen speaks (under the view's lock)
        self.on_job_start: Callable[[str, int], None] | None = None
        # node health: causes for the reports, health reports of their own (diagnosis/health)
        self.health = LiveHealth()
        self._health_pending: list[tuple[str, FaultReport]] = []

    def _problem(self, job: str, stage: str) -> None:
        """A failure in one job's part (call from an ``except`` block): counted, logged at
        most once per interval per job and stage, and kept from the other jobs."""
        self.problems[stage] = self.problems.get(stage, 0) + 1
        if self._rated.warning(f"{stage}:{job}", "job %s: its live analysis failed (%s); the "
                               "other jobs are not affected", job, stage):
            log.debug("the failure", exc_info=True)

    def problem_count(self) -> int:
        return sum(self.problems.values())

    # -- from the writer -----------------------------------------------------------------------
    def apply(self, writes: list[Write]) -> None:
        """Called by the writer with freshly stored writes, in arrival order. Returns at once
        unless the backlog is full."""
        if not writes:
            return
        ops = sum(len(w.body.cols) for w in writes if isinstance(w.body, OpRows))
        n = sum(records_of(w) for w in writes)
        now = time.monotonic()
        with self._cond:
            self.records_total += ops
            if ops:
                self._rate.append((now, ops))
            if self._full(n):
                while self._full(n):
                    self._cond.wait(0.1)
                self.backpressure_s += time.monotonic() - now
            self._backlog.append((now, list(writes), n))
            self._backlog_records += n
            self._cond.notify_all()

    def _full(self, n: int) -> bool:
        # a batch larger than the whole bound still goes, alone
        return bool(self._backlog) and not self._closed and \
            self._backlog_records + n > self._max_backlog

    def close(self) -> None:
        """Stop making the writer wait (the daemon is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def heard(self, stats: c4_pb2.SidecarStats) -> None:
        """A sidecar's copy of its collectors' counters: each carries when its collector last
        spoke. Not stored; kept until the next pass (``Heartbeats``). Raises ``BatchError``
        for counters that do not decode."""
        self._heartbeats.add(stats)

    def _apply_heartbeats(self) -> None:
        for (job, attempt), beats in self._heartbeats.take().items():
            st = self._jobs.get((job, attempt))
            if st is None:
                continue
            # only registered ranks: a stray rank id must not size the engine's arrays
            beats = beats.where(_registered(st, beats.rank))
            if not len(beats):
                continue
            try:
                st.budget.recorded(beats.rank, beats.recorded, beats.t_ns)
            except Exception:
                self._problem(job, "heard")
            newest = int(beats.t_ns.max())
            if newest > st.beat_ns:
                st.beat_ns, st.alive = newest, time.monotonic()
                self._revive(st)
            try:
                st.engine.heard(beats.rank, beats.t_ns)
                if beats.leaving.any():
                    gone = beats.where(beats.leaving)
                    st.engine.heard(gone.rank, gone.t_ns, leaving=True)
            except Exception:
                self._problem(job, "heard")

    # -- the detectors' thread -------------------------------------------------------------
    def run(self, stop: threading.Event, interval_s: float) -> None:
        """Apply the backlog and analyse every ``interval_s`` until ``stop`` is set."""
        next_at = time.monotonic() + interval_s
        while not stop.is_set():
            with self._cond:
                if not self._backlog:
                    self._cond.wait(max(0.0, min(next_at - time.monotonic(), 0.5)))
            try:
                self.drain(APPLY_CHUNK)
                if time.monotonic() >= next_at:
                    self.analyze()
                    self._evict_idle()
                    if self._heap is not None:
                        self._heap.maintain()
                    # a pass longer than the interval (a job of 100k+ ranks) leaves as long
                    # again for applying what arrives: the detectors never starve ingest
                    next_at = time.monotonic() + max(interval_s, self.last_analysis_s)
            except Exception:  # a detector bug must not take the daemon down
                log.exception("live analysis failed")
                next_at = time.monotonic() + interval_s

    def drain(self, max_records: int = 0) -> int:
        """Apply queued writes to the engines (all, or about ``max_records``); returns the
        records applied."""
        done = 0
        while not max_records or done < max_records:
            # several stored commits at once: their op batches reach the engines together
            # (see ``_runs``)
            with self._cond:
                if not self._backlog:
                    break
                take, n = [], 0
                for entry in self._backlog:
                    take.append(entry)
                    n += entry[2]
                    if len(take) >= _APPLY_COMMITS or n >= (max_records or APPLY_CHUNK):
                        break
            t0 = time.perf_counter()
            with self._lock:
                self._apply_now([w for _, writes, _ in take for w in writes])
            self.apply_s += time.perf_counter() - t0
            with self._cond:
                for _ in take:
                    self._backlog.popleft()
                self._backlog_records -= n
                self.records_applied += n
                if self._unjudged_since is None:
                    self._unjudged_since = take[0][0]
                self._cond.notify_all()
            done += n
        return done

    def lag(self) -> float:
        """Seconds since the oldest stored write not yet fully judged arrived (0: none)."""
        with self._cond:
            since = [t for t in (self._backlog[0][0] if self._backlog else None,
                                 self._unjudged_since, self._judging_since) if t is not None]
        return time.monotonic() - min(since) if since else 0.0

    def backlog(self) -> int:
        with self._cond:
            return self._backlog_records

    def jobs(self) -> int:
        # without the lock: the detectors hold it for whole passes, and a metrics scrape must
        # not wait on them (a dict's length is read atomically)
        return len(self._jobs)

    # -- job states --------------------------------------------------------------------------
    def _job(self, job: str, attempt: int, first: Write) -> JobState | None:
        """The live state of a job attempt; None for an attempt older than one already seen
        (a restarted job's earlier processes are gone: their silence is not a fault)."""
        key = (job, attempt)
        state = self._jobs.get(key)
        if state is None:
            if any(j == job and a > attempt for j, a in self._jobs):
                return None
            for old in [k for k in self._jobs if k[0] == job]:
                log.info("job %s attempt %d replaces attempt %d in the live view", job,
                         attempt, old[1])
                del self._jobs[old]
            state = self._jobs[key] = JobState(job, attempt,
                                               Engine(self._topology, self._engine_config),
                                               budget=JobBudget(self._budget))
            if self.on_job_start is not None:
                self.on_job_start(job, attempt)
            # Evicted while idle, or known from before a daemon restart: its registrations
            # were stored earlier and will not come again.
            evicted = key in self._evicted
            self._evicted.pop(key, None)
            if evicted or not isinstance(first.body, RankRecord):
                self._seed(state)
        else:
            self._revive(state)
        state.heard = state.alive = time.monotonic()
        return state

    def _revive(self, st: JobState) -> None:
        """A job taken for gone speaks again (it was silent for long, not killed): it runs
        again; its ended faults stay resolved. Lock held."""
        if not st.gone:
            return
        log.info("job %s attempt %d speaks again after it was taken for gone", st.job,
                 st.attempt)
        st.ended = st.gone = False
        if self.on_job_start is not None:
            self.on_job_start(st.job, st.attempt)

    def _seed(self, st: JobState) -> None:
        if self._store is None:
            return
        try:
            ranks = self._store.ranks(st.job, st.attempt)
            groups = self._store.groups(st.job, st.attempt)
        except Exception as exc:
            log.warning("cannot reload job %s from the store for the live view: %s", st.job,
                        exc)
            return
        for r in ranks:
            self._add_rank(st, r)
        for g in groups:
            self._add_group(st, g)
        self._restore_schedule(st)
        if ranks or groups:
            log.info("live view: job %s attempt %d reloaded (%d ranks, %d groups)", st.job,
                     st.attempt, len(ranks), len(groups))

    def _evict_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, st in self._jobs.items() if now - st.heard > self._idle_s]:
                del self._jobs[key]
                if self._control is not None:   # reloaded from the store if it speaks again
                    self._control.forget(*key)
                self._evicted[key] = None
                if len(self._evicted) > MAX_EVICTED:
                    self._evicted.popitem(last=False)
                log.info("job %s attempt %d silent for %.0f s: it leaves the live view", *key,
                         self._idle_s)
                if self._heap is not None:
                    self._heap.thaw()
                if not any(j == key[0] for j, _ in self._jobs):
                    self.health.forget(key[0])

    def remove(self, job: str) -> int:
        """Drop every attempt of a job (removed from the store); returns how many."""
        with self._lock:
            keys = [k for k in self._jobs if k[0] == job]
            for key in keys:
                del self._jobs[key]
                if self._control is not None:
                    self._control.forget(*key)
            for key in [k for k in self._evicted if k[0] == job]:
                del self._evicted[key]
        self.health.forget(job)
        if keys and self._heap is not None:
            self._heap.thaw()
        return len(keys)

    @staticmethod
    def _add_rank(st: JobState, body: RankRecord) -> None:
        st.ranks[body.rank] = body
        st.ranks_version += 1
        st.budget.world = max(st.budget.world, int(body.world_size))
        st.engine.add_rank(body.rank, body.host, body.gpu or None, body.nic or None,
                           body.local_rank if body.local_rank >= 0 else None)

    @staticmethod
    def _add_group(st: JobState, body: GroupRecord) -> None:
        st.groups[body.pg] = body
        st.engine.add_group(body.pg, list(body.ranks))

    def _apply_now(self, writes: list[Write]) -> None:
        now = time.monotonic()
        for run in _runs(writes):
            body = run[0].body
            try:
                if isinstance(body, OpRows):
                    self._apply_ops(run, now)
                elif len(run) > 1:
                    self._apply_batches(run, now)
                else:
                    self._apply_one(run[0], now)
            except _TooManyNames:
                self._problem(body.job, "names")
            except Exception:   # this job's records stay stored; the other jobs go on
                self._problem(body.job, "apply")

    def _apply_ops(self, run: list[Write], now: float) -> None:
        """Op batches of one job attempt, one after the other in arrival order."""
        st = self._job(run[0].body.job, run[0].body.attempt, run[0])
        if st is None:
            return
        parts = []
        for w in run:
            body = w.body
            assert isinstance(body, OpRows)
            st.channels.carried(w.sidecar, _newest(body))
            n = len(body.cols)
            st.records += n
            if n:
                st.last_ns = max(st.last_ns, int(np.max(body.cols["t_enter_ns"])))
                st.budget.observe("ops", n, now)
                st.budget.observe_seqs(top_seqs(body.cols["pg"], body.cols["seq"],
                                                body.cols.strings), now)
                parts.append(body.cols)
        self._check_names(st)
        if parts:
            cols = concat(parts)
            if len(parts) > 1:
                # in time order, as a trace: the engine feeds a batch to its arena in pieces,
                # cut where a call would take the slot of an earlier one of its communicator
                # (64 slots each), and each piece costs a batch's fixed work. Batch after
                # batch, each node's second of a busy communicator spanning hundreds of calls,
                # a second of a 1,024-rank job at K = 8 from 128 sidecars fell into 234
                # pieces (4 in time order), 4 s of a 16,384-rank job at K = 128 from 16
                # streams into 1,282 (7); and a call whose members' rows came from two nodes
                # lost its slot to the first node's later calls before the second's rows came
                cols = take(cols, np.argsort(op_visible_ns(cols), kind="stable"))
            st.engine.add_ops(cols)

    def _apply_batches(self, run: list[Write], now: float) -> None:
        """Progress (or linkstat) batches of one job attempt, one after the other, as one."""
        first = run[0].body
        assert isinstance(first, BatchRows) and first.cols is not None
        st = self._job(first.job, first.attempt, run[0])
        if st is None:
            return
        bodies = []
        for w in run:
            assert isinstance(w.body, BatchRows) and w.body.cols is not None
            st.channels.carried(w.sidecar, _newest(w.body))
            bodies.append(w.body)
        joined = replace(first, count=sum(b.count for b in bodies),
                         t_lo=min(b.t_lo for b in bodies), t_hi=max(b.t_hi for b in bodies),
                         payload=b"", cols=concat([b.cols for b in bodies if b.cols is not None]))
        self._apply_batch(st, joined, now)

    def _apply_one(self, w: Write, now: float) -> None:
        body = w.body
        st = self._job(body.job, body.attempt, w)
        if st is None:
            return
        cid = st.channels.carried(w.sidecar, _newest(body))
        if isinstance(body, RankRecord):
            st.channels.register(body.rank, cid)
            self._add_rank(st, body)
        elif isinstance(body, GroupRecord):
            self._add_group(st, body)
        elif isinstance(body, ConnRows):
            st.budget.observe("conns", len(body.cols), now)
            names = np.asarray(body.cols.strings, dtype=object)
            if len(body.cols):
                st.linkstats.learn(body.cols["rank"], names[body.cols["local"]].tolist())
            conns = st.links.add(body.cols)
            if conns is not None and len(conns):
                st.engine.add_conns(conns, sampled=True)
        elif isinstance(body, BatchRows) and body.kind == "health":
            self._health_pending.extend(
                (body.job, r) for r in self.health.add(body.job, [
                    HealthRecord.from_proto(s)
                    for s in c4_pb2.HealthBatch.FromString(body.payload).samples]))
        elif isinstance(body, BatchRows) and body.cols is not None:
            self._apply_batch(st, body, now)

    def _check_names(self, st: JobState) -> None:
        """A job's name tables (communicators, ops) grow with every new name its records use:
        past ``max_job_names`` its further records are stored but no longer analysed."""
        eng = st.engine
        if eng is not None and len(eng.pg_names) + len(eng.op_names) > self.max_job_names:
            raise _TooManyNames(st.job)

    def _apply_batch(self, st: JobState, body: BatchRows, now: float) -> None:
        """Reduced telemetry: progress, linkstat and port records."""
        cols = body.cols
        assert cols is not None
        st.budget.observe(body.kind, len(cols), now)
        eng = st.engine
        if body.kind == "progress":
            st.budget.observe_windows("progress", cols["t_ns"], st.budget.window_ns)
            st.budget.observe_seqs(top_seqs(cols["pg"], cols["entered"], cols.strings), now)
            if eng is not None and len(cols):
                eng.add_progress(progress_records(cols), fill_open=body.completed_only)
        elif body.kind == "linkstat":
            st.budget.observe_windows("linkstat", cols["t_ns"], cols["window_ns"])
            recs = st.linkstats.add(cols, now)
            if eng is not None and recs is not None and len(recs):
                eng.add_linkstats(recs)
        elif body.kind == "port" and eng is not None and len(cols):
            eng.add_ports(port_records(cols))

    # -- the records budget -----------------------------------------------------------------
    def _budgets(self, now_ns: int) -> None:
        """Each job's sampling factor and windows from what it sends (``budget``), within the
        share of its budget the daemon can follow now (``scheduling.Governor``)."""
        now = time.monotonic()
        demand = budgets = 0.0
        for st in self._jobs.values():
            if not st.ended:
                budgets += st.budget.cfg.records_per_s
                try:
                    demand += st.budget.sending(now)
                except Exception:
                    self._problem(st.job, "budget")
        queued = self.backlog() + (self.upstream() if self.upstream is not None else 0)
        stored, store_s = self.stored() if self.stored is not None else (0, 0.0)
        scale = self.governor.govern(now, Load(self.records_applied, self.apply_s,
                                               self.analysis_s, queued, demand, budgets,
                                               stored, store_s))
        room = self.governor.room(budgets)
        for st in self._jobs.values():
            st.budget.scale, st.budget.room = scale, room
            try:
                decision = st.budget.decide(now, now_ns)
                if decision is not None:
                    st.reduced = self.schedules.enact(st.job, st.attempt, st.engine, decision,
                                                      now_ns) or st.reduced
            except Exception:
                self._problem(st.job, "budget")

    def _restore_schedule(self, st: JobState) -> None:
        """A job known from before a daemon restart keeps its schedule."""
        reduced = self.schedules.restore(st.job, st.attempt, st.budget, st.engine)
        if reduced is not None:
            st.reduced = reduced

    def heard_s_ago(self, job: str) -> float | None:
        """Seconds since the job's latest attempt in the view applied a record (None: not in
        the view)."""
        with self._lock:
            heard = [st.heard for (j, _), st in self._jobs.items() if j == job]
        return time.monotonic() - max(heard) if heard else None

    def job_reduced(self, job: str) -> bool:
        """Whether a job in the live view ships (or has shipped) reduced telemetry."""
        with self._lock:
            return any(st.reduced for (j, _), st in self._jobs.items() if j == job)

    def sample_of(self, job: str) -> int:
        with self._lock:
            return max((st.budget.sample for (j, _), st in self._jobs.items() if j == job),
                       default=1)

    # -- analysis ----------------------------------------------------------------------------
    def analyze(self, now_ns: int | None = None) -> int:
        """Run every job's detectors once; file what they report. Returns reports filed."""
        now_ns = now_ns or time.time_ns()
        with self._cond:
            self._judging_since, self._unjudged_since = self._unjudged_since, None
            # records stored but not yet given to the detectors: a rank among them is not
            # silent
            unapplied_ns = int((time.monotonic() - self._backlog[0][0]) * 1e9) \
                if self._backlog else 0
        t0 = time.perf_counter()
        try:
            with self._lock:
                for st in self._jobs.values():
                    try:
                        self._assemble_topology(st)
                    except Exception:  # the detectors go on with the topology they had
                        log.exception("job %s: assembling its topology failed; it is tried "
                                      "again when a rank registers or a host changes", st.job)
                self._apply_heartbeats()
                found = []
                for st in self._jobs.values():
                    if st.ended:
                        # its reports were resolved with its end: a hang it left open would
                        # otherwise be revised ("waited 539 s") for as long as the daemon runs
                        continue
                    try:
                        found.append((st.job, st.engine.advance(
                            now_ns, unapplied_ns, st.channels.delivery(now_ns)), _places(st)))
                    except Exception:
                        self._problem(st.job, "advance")
                self._budgets(now_ns)
                ended = [st for st in self._jobs.values() if not st.ended and _all_left(st)]
                for st in ended:
                    st.ended = True
                mono = time.monotonic()
                gone = [(st, mono - st.alive) for st in self._jobs.values()
                        if not st.ended and mono - st.alive > self._gone_after_s]
                for st, _ in gone:
                    st.ended = st.gone = True
                pending, self._health_pending = self._health_pending, []
            filed = 0
            for job, reports, places in found:
                # causes from the node's own health, joined at the report level; an open
                # report gets them again when a finding came after it was filed
                try:
                    explained = [self.health.explain(job, r, places) for r in reports]
                    explained += self.health.revisit(job, places)
                except Exception:
                    self._problem(job, "explain")
                    explained = list(reports)
                for report in explained:
                    try:
                        self._hub.file(job, report)
                        filed += 1
                    except Exception:    # the store is down, or the report is bad
                        self._problem(job, "file")
            for job, report in pending:
                try:
                    self._hub.file(job, report)
                    filed += 1
                except Exception:
                    self._problem(job, "file")
            if self.on_job_end is not None:
                for st in ended:
                    self.on_job_end(st.job, st.attempt, now_ns)
                for st, silent_s in gone:
                    self.on_job_end(st.job, st.attempt, now_ns - int(silent_s * 1e9),
                                    silent_s=silent_s)
        finally:
            self.last_analysis_s = time.perf_counter() - t0
            self.analysis_seconds.observe(self.last_analysis_s)
            self.analysis_s += self.last_analysis_s
            with self._cond:
                self._judging_since = None
        return filed

    def _assemble_topology(self, st: JobState) -> None:
        """The job's topology from its hosts' discovered internals and the daemon's fabric
        (joined again when the job's hosts or their internals change), its ranks placed on it
        (again when a rank registers); the engine localizes and places ranks on it. A job none
        of whose hosts was discovered keeps the fabric and the places its ranks announced.
        Lock held."""
        if self._hosts is None or not st.ranks:
            return
        key = (st.ranks_version, self._hosts.generation)
        if key == st.topo_key:
            return
        st.topo_key = key
        from c4.topology.job import join_hosts, place_ranks

        t0 = time.perf_counter()
        hosts = frozenset(r.host for r in st.ranks.values())
        previous = st.topology.places if st.topology is not None else None
        if st.topology is None or st.topo_hosts != (hosts, self._hosts.generation):
            # while a large job's ranks are still registering, its hosts change every pass:
            # join them once the registrations are complete or paused for a pass
            registering = len(st.ranks) < st.budget.world and \
                st.ranks_version != st.topo_pass_version
            st.topo_pass_version = st.ranks_version
            if registering and st.topology is not None:
                st.topo_key = (-1, -1)
                return
            st.topology = join_hosts(st.job, hosts, self._hosts.internals(), self._topology,
                                     self._topology_source)
            st.topo_hosts = (hosts, self._hosts.generation)
        jt = st.topology
        place_ranks(jt, st.ranks.values(), previous)
        if not jt.discovered:
            return
        if st.engine.topology is not jt.topology:
            st.engine.set_topology(jt.topology)
        for rank, place in jt.places.items():
            st.engine.add_rank(rank, place.host, place.gpu, place.nic)
        log.info("job %s: topology of %d discovered of %d hosts, %d ranks placed in %.2f s "
                 "(%d issues)", st.job, len(jt.discovered), len(jt.hosts), len(jt.places),
                 time.perf_counter() - t0, len(jt.issues))

    def job_topology(self, job: str) -> JobTopology | None:
        """The latest attempt's assembled topology (a JobTopology) if the job is in the live
        view, else None."""
        with self._lock:
            states = [st for (j, _), st in self._jobs.items() if j == job]
            if not states:
                return None
            st = max(states, key=lambda s: s.attempt)
            self._assemble_topology(st)
            return st.topology

    def rate(self, window_s: float = 60.0) -> float:
        now = time.monotonic()
        recent = [(t, n) for t, n in list(self._rate) if now - t <= window_s]
        if not recent:
            return 0.0
        oldest = min(t for t, _ in recent)
        return sum(n for _, n in recent) / max(now - oldest, 1.0)
