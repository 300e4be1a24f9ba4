"""Reduction at the edge: what the node's sidecar ships per job, by the job's sampling schedule.

Collectors ship every call over the Unix socket (cheap, local); the sidecar decides what leaves
the node. Per job attempt (:class:`EdgeJob`):

* With every factor 1 (no schedule, the default for small jobs) it ships what it always did:
  every op row and the raw socket counter samples (``ConnSampleBatch``).
* Once the daemon's schedule sets a factor above 1 (reduced mode) it ships the op rows of the
  sampled calls, every row not ok (errors) and every open row (a call pending past the
  collectors' ``C4_OPEN_AFTER``: last words) at once whatever the sampling, and the completion
  of a call that went out open; ``progress`` records from an :class:`EdgeReducer` fed every
  row, and ``linkstat`` records from the socket samples (:mod:`collectors.sidecar.links`)
  instead of raw samples, at the end of each window (window ``window_s``, or the daemon's) once
  the watermark (now - ``lag_s``) has passed it.
* Every full row also goes into the detail ring (:mod:`collectors.sidecar.ring`) for the
  daemon's detail requests, and mends a schedule step that arrived after rows it covers: the
  rows the new step keeps and the old one dropped are shipped from the ring (counted as
  ``late_steps``), so a sampled call stays complete across its members.

A window change announced for time T takes effect when the watermark passes T: the old reducer
is flushed at T, a new one starts, seeded from the ring with the calls of the last moments (its
records for windows before T are dropped: the old reducer sent those).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from collectors.reduce import EdgeReducer
from collectors.reduce.sampling import take
from collectors.sidecar.links import SocketTransfers
from collectors.sidecar.ports import PortWatch
from collectors.sidecar.ring import DetailRing
from collectors.sidecar.schedule import Schedule
from proto import c4_pb2
from proto.codec import (
    LINKSTAT_COLUMNS,
    PROGRESS_COLUMNS,
    Columns,
    concat,
    decode_ops,
    encode_conns,
    encode_linkstats,
    encode_ops,
    encode_ports,
    encode_progress,
)

log = logging.getLogger(__name__)

Key = tuple[str, int]
Emit = Callable[..., None]        # Outbox.put(**body)
AddColumns = Callable[[str, int, Columns], None]   # Batcher.add_columns
STATUS_OK = 0
# unsampled calls shipped open whose completion is still to ship, per job (oldest forgotten)
MAX_OPEN_REMEMBERED = 65536
PORTS_IDLE_S = 60.0      # a job whose ranks were silent this long gets no port records
JOB_IDLE_S = 600.0       # ... and this long: forgotten
PORT_MODES = ("mapped", "all", "off")


@dataclass(frozen=True)
class EdgeConfig:
    """The sidecar's reduction settings (``c4 sidecar`` flags)."""

    #: progress and linkstat window while the daemon sets none (``--window``)
    window_s: float = 1.0
    #: the watermark's lag behind now: rows of calls entered earlier have all arrived
    #: (collectors flush every 0.1 s and ship a pending call open after 0.5 s)
    lag_s: float = 0.8
    #: bytes of full records kept for detail requests (``--detail-bytes``; 0: none)
    ring_bytes: int = 128 << 20
    #: NIC ports read from sysfs (``--ports``): "mapped" (the ports of ``nic_map``: none
    #: without one), "all" (every port but lo, unmapped ones as ``<host>/<port>``), "off"
    ports: str = "mapped"
    sysfs_root: str = "/sys"
    #: port name -> topology NIC id (``--nic-map``); empty: ``<host>/<port>``
    nic_map: tuple[tuple[str, str], ...] = ()
    #: a port record at least this often while nothing changes (``--port-heartbeat``)
    port_heartbeat_s: float = 30.0
    #: most records one detail answer carries
    detail_max_records: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("window_s", "port_heartbeat_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.lag_s < 0 or self.ring_bytes < 0:
            raise ValueError("lag_s and ring_bytes must not be negative")
        if self.ports not in PORT_MODES:
            raise ValueError(f"ports must be one of {', '.join(PORT_MODES)}, got {self.ports!r}")

    @property
    def window_ns(self) -> int:
        return int(self.window_s * 1e9)


@dataclass
class EdgeStats:
    """Counters of the edge, cumulative (reported in the sidecar's stats and metrics)."""

    ops_in: int = 0
    ops_out: int = 0
    progress_out: int = 0
    linkstat_out: int = 0
    conns_out: int = 0
    ports_out: int = 0
    records_out: int = 0          # every record that left the node (detail aside)
    bytes_out: int = 0            # their ingest requests' sizes
    schedules: int = 0            # schedule versions taken
    late_steps: int = 0           # steps that arrived after rows they cover (mended)
    mended_rows: int = 0          # rows shipped from the ring for late steps
    detail_requests: int = 0
    detail_refused: int = 0       # answered GONE: the ring no longer held the range
    detail_partial: int = 0
    detail_rows: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class EdgeJob:
    """One job attempt on this node: its schedule, reducer and socket transfers."""

    def __init__(self, job: str, attempt: int, config: EdgeConfig, ring: DetailRing) -> None:
        self.job, self.attempt = job, attempt
        self.config = config
        self.ring = ring
        self.schedule = Schedule()
        self.window_ns = config.window_ns
        self.reducer: EdgeReducer | None = None
        self._cut_ns = 0              # records of windows ending at or before this are sent
        self._pending_window: tuple[int, int] | None = None   # (window_ns, from_ns)
        self.sockets = SocketTransfers()
        self._recent: deque[tuple[int, Columns]] = deque()    # transfer rows, for a re-seed
        self.max_seq: dict[str, int] = {}
        self._open: OrderedDict[tuple[int, str, str, int, int], None] = OrderedDict()
        self.ports_sent = False
        self.heard = time.monotonic()   # last rows or samples from its ranks
        self._inbox: list[Columns] = []

    @property
    def reduced(self) -> bool:
        return self.schedule.max_sample > 1

    # -- op rows ------------------------------------------------------------------------
    def take_ops(self, cols: Columns) -> Columns | None:
        """The rows of a collector batch to ship now (full telemetry), or None: reduced, they
        wait for :meth:`drain` (one pass per tick for every rank's batches, not one per
        batch: the reducer's cost is mostly per call)."""
        self._note_seqs(cols)
        if not self.reduced:
            return cols
        self._inbox.append(cols)
        return None

    def drain(self) -> Columns | None:
        """The rows to ship of the batches received since the last drain (reduced mode)."""
        if not self._inbox:
            return None
        cols = concat(self._inbox) if len(self._inbox) > 1 else self._inbox[0]
        self._inbox = []
        if not self.reduced:
            return cols
        assert self.reducer is not None
        self.reducer.observe_calls(cols)
        status = np.asarray(cols["status"])
        open_ = np.asarray(cols["t_end_ns"]) < 0
        sampled = self.schedule.kept(cols)
        keep = sampled | (status != STATUS_OK) | open_
        self._remember_open(cols, open_ & ~sampled)
        if self._open:
            keep |= self._completing(cols, ~keep)
        return cols if keep.all() else take(cols, keep)

    def _note_seqs(self, cols: Columns) -> None:
        pg = np.asarray(cols["pg"], dtype=np.int64)
        seq = np.asarray(cols["seq"], dtype=np.int64)
        if not len(pg):
            return
        top = np.full(len(cols.strings), -1, np.int64)
        np.maximum.at(top, pg, seq)
        for i in np.flatnonzero(top >= 0).tolist():
            name = cols.strings[i]
            if top[i] > self.max_seq.get(name, -1):
                self.max_seq[name] = int(top[i])

    def _keys(self, cols: Columns, rows: np.ndarray) -> list[tuple[int, str, str, int, int]]:
        names = cols.strings
        return list(zip(cols["rank"][rows].tolist(),
                        [names[i] for i in cols["pg"][rows].tolist()],
                        [names[i] for i in cols["op"][rows].tolist()],
                        cols["peer"][rows].tolist(), cols["seq"][rows].tolist(), strict=True))

    def _remember_open(self, cols: Columns, mask: np.ndarray) -> None:
        rows = np.flatnonzero(mask)
        for k in self._keys(cols, rows):
            self._open[k] = None
        while len(self._open) > MAX_OPEN_REMEMBERED:
            self._open.popitem(last=False)

    def _completing(self, cols: Columns, candidates: np.ndarray) -> np.ndarray:
        """Rows that complete a call shipped open although unsampled: they go too."""
        out = np.zeros(len(cols), dtype=bool)
        done = candidates & (np.asarray(cols["t_end_ns"]) >= 0)
        seqs = np.fromiter((k[4] for k in self._open), dtype=np.int64, count=len(self._open))
        rows = np.flatnonzero(done & np.isin(cols["seq"], seqs))
        for row, k in zip(rows.tolist(), self._keys(cols, rows), strict=True):
            if k in self._open:
                del self._open[k]
                out[row] = True
        return out

    # -- schedule -------------------------------------------------------------------------
    def set_schedule(self, new: Schedule, now_ns: int) -> tuple[Columns | None, int]:
        """Take a newer schedule. Returns the rows to ship that mend steps which came after
        rows they cover (and how many such steps there were)."""
        old, self.schedule = self.schedule, new
        mend: list[Columns] = []
        late = 0
        for pg, steps in new.steps.items():
            top = self.max_seq.get(pg, -1)
            for from_seq, _k in steps:
                if from_seq > top or (from_seq, _k) in old.steps.get(pg, ()):
                    continue
                late += 1
                held = self.ring.rows(self.job, self.attempt, from_ns=0, pg=pg,
                                      min_seq=from_seq)
                if held is None:
                    continue
                extra = new.kept(held) & ~old.kept(held)
                if extra.any():
                    mend.append(take(held, extra))
        target = new.window_ns or self.config.window_ns
        if target != self.window_ns and (self._pending_window is None or
                                         self._pending_window[0] != target):
            self._pending_window = (target, new.window_from_ns)
        if self.reduced and self.reducer is None:
            self._start_reducer(self.window_ns, now_ns - int(self.config.lag_s * 1e9), 0)
        elif not self.reduced and self.reducer is not None:
            self.reducer = None   # back to full telemetry: every row and raw samples again
        return (concat(mend) if mend else None), late

    def _start_reducer(self, window_ns: int, seed_from_ns: int, cut_ns: int) -> None:
        """A fresh reducer, fed the ring's calls since ``seed_from_ns`` and the recent socket
        transfers, whose records for windows ending at or before ``cut_ns`` are dropped."""
        self.window_ns = window_ns
        self.reducer = EdgeReducer(1, window_ns)
        self._cut_ns = cut_ns
        seed = self.ring.rows(self.job, self.attempt, from_ns=seed_from_ns)
        if seed is not None:
            self.reducer.observe_calls(seed)
        for _, rows in self._recent:
            self.reducer.add_transfers(rows)
        stuck = self.sockets.open_rows()
        if len(stuck):
            self.reducer.add_transfers(stuck)

    # -- socket samples -------------------------------------------------------------------
    def take_conns(self, cols: Columns, now_ns: int) -> Columns | None:
        """Raw samples to ship (full telemetry), or None: they went into linkstat windows."""
        rows = self.sockets.add(cols)
        if len(rows):
            self._recent.append((now_ns, rows))
        keep_ns = now_ns - int((2 * self.config.lag_s + 2 * self.window_ns / 1e9) * 1e9)
        while self._recent and self._recent[0][0] < keep_ns:
            self._recent.popleft()
        if not self.reduced:
            return cols
        assert self.reducer is not None
        if len(rows):
            self.reducer.add_transfers(rows)
        return None

    # -- windows --------------------------------------------------------------------------
    def windows(self, now_ns: int) -> tuple[Columns | None, Columns | None]:
        """The progress and linkstat records of the windows the watermark has closed."""
        if not self.reduced or self.reducer is None:
            return None, None
        wm = now_ns - int(self.config.lag_s * 1e9)
        progress, links = [], []
        pending = self._pending_window
        if pending is not None and (pending[1] <= wm):
            new_ns, at = pending
            at = at or wm
            last = self.reducer.flush(at)
            progress.append(self._progress(last.progress))
            links.append(self._linkstat(last.linkstat))
            self._pending_window = None
            self._start_reducer(new_ns, at - int(self.config.lag_s * 1e9) - self.window_ns, at)
        out = self.reducer.advance(wm)
        progress.append(self._progress(out.progress))
        links.append(self._linkstat(out.linkstat))
        return _join(progress), _join(links)

    def _progress(self, p: Columns) -> Columns | None:
        keep = p["t_ns"] > self._cut_ns
        if not keep.any():
            return None
        c = {k: np.asarray(p[k][keep]) for k in PROGRESS_COLUMNS}
        return Columns(c, list(p.strings))

    def _linkstat(self, ls: Columns) -> Columns | None:
        keep = ls["t_ns"] > self._cut_ns
        if not keep.any():
            return None
        sid = np.asarray(ls["dst"][keep])
        peer, local, remote = self.sockets.label(sid)
        strings: dict[str, int] = {}
        loc = [strings.setdefault(s, len(strings)) for s in local]
        rem = [strings.setdefault(s, len(strings)) for s in remote]
        c = {k: np.asarray(ls[k][keep]) for k in ("src", "t_ns", "window_ns", "transfers",
                                                   "bytes", "busy_ns", "max_ns", "open",
                                                   "open_since_ns", "retrans")}
        c.update(dst=peer, local=np.asarray(loc), remote=np.asarray(rem),
                 pg=np.full(len(sid), -1, np.int64))
        return Columns({k: c[k] for k in LINKSTAT_COLUMNS}, list(strings))


def _join(parts: list[Columns | None]) -> Columns | None:
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else concat(parts)


class Edge:
    """Every job on this node: called by the sidecar for frames, samples and ticks, and by the
    outbox for the daemon's control messages (handled on the tick thread)."""

    def __init__(self, host: str, config: EdgeConfig, emit: Emit,
                 add_columns: AddColumns, clock: Callable[[], int] = time.time_ns) -> None:
        self.host = host
        self.config = config
        self._emit_raw = emit
        self._add_columns = add_columns
        self._clock = clock
        self.ring = DetailRing(config.ring_bytes)
        watch = config.ports == "all" or (config.ports == "mapped" and bool(config.nic_map))
        self.ports = PortWatch(host, sysfs_root=config.sysfs_root,
                               nic_map=dict(config.nic_map), all_ports=config.ports == "all",
                               heartbeat_s=config.port_heartbeat_s, clock=clock) \
            if watch else None
        self.stats = EdgeStats()
        self._jobs: dict[Key, EdgeJob] = {}
        self._lock = threading.RLock()
        self._control: queue.Queue[c4_pb2.Control] = queue.Queue()
        self._next_window = 0

    # -- what leaves the node -----------------------------------------------------------------
    def emit(self, **body: object) -> None:
        """Queue one ingest request, counting its records and bytes."""
        ((kind, msg),) = body.items()
        n = msg.ops.count if kind == "detail" else 0 if kind in ("rank", "group", "stats") \
            else msg.count  # type: ignore[attr-defined]
        with self._lock:
            if kind == "detail":     # on demand, not the steady stream
                self.stats.detail_rows += n
            else:
                self.stats.records_out += n
                self.stats.bytes_out += msg.ByteSize()  # type: ignore[attr-defined]
            if kind == "ops":
                self.stats.ops_out += n
        self._emit_raw(**body)

    def job(self, job: str, attempt: int) -> EdgeJob:
        with self._lock:
            st = self._jobs.get((job, attempt))
            if st is None:
                st = self._jobs[(job, attempt)] = EdgeJob(job, attempt, self.config, self.ring)
            return st

    # -- from the collectors ----------------------------------------------------------------
    def add_ops(self, batch: c4_pb2.OpBatch) -> int:
        """A collector's batch: into the ring, then the rows to ship to the batcher. Returns
        the rows received; raises proto.codec.BatchError for a malformed batch."""
        cols = decode_ops(batch)
        n = len(cols)
        if not n:
            return 0
        self.ring.add(batch.job, batch.attempt, cols)
        with self._lock:
            self.stats.ops_in += n
            st = self.job(batch.job, batch.attempt)
            st.heard = time.monotonic()
            kept = st.take_ops(cols)
        if kept is not None and len(kept):
            self._add_columns(batch.job, batch.attempt, kept)
        return n

    def drain(self) -> None:
        """Judge the rows of reduced jobs received since the last call, ship the kept ones."""
        with self._lock:
            jobs = list(self._jobs.values())
        for st in jobs:
            with self._lock:
                kept = st.drain()
            if kept is not None and len(kept):
                self._add_columns(st.job, st.attempt, kept)

    def add_conns(self, job: str, attempt: int, cols: Columns) -> None:
        """A sample of the job's socket counters."""
        with self._lock:
            st = self.job(job, attempt)
            st.heard = time.monotonic()
            raw = st.take_conns(cols, self._clock())
        if raw is not None and len(raw):
            with self._lock:
                self.stats.conns_out += len(raw)
            self.emit(conns=encode_conns(job, raw, attempt=attempt))

    def forget(self, job: str, attempt: int) -> None:
        with self._lock:
            self._jobs.pop((job, attempt), None)

    # -- from the daemon --------------------------------------------------------------------
    def on_control(self, msg: c4_pb2.Control) -> None:
        """Called on the outbox's stream thread: queued for the tick thread."""
        self._control.put(msg)

    def _handle(self, msg: c4_pb2.Control) -> None:
        kind = msg.WhichOneof("body")
        if kind == "schedule":
            self._schedule(msg.schedule)
        elif kind == "detail":
            self._detail(msg.detail)
        else:
            log.warning("ignoring a control message from the daemon with body %r (a newer "
                        "daemon?)", kind)

    def _schedule(self, msg: c4_pb2.SampleSchedule) -> None:
        try:
            new = Schedule.from_proto(msg)
        except ValueError as exc:
            log.error("ignoring a bad sampling schedule for job %s: %s", msg.job, exc)
            return
        with self._lock:
            st = self.job(msg.job, msg.attempt)
            if new.version <= st.schedule.version:
                return
            was = st.schedule.max_sample
            mend, late = st.set_schedule(new, self._clock())
            self.stats.schedules += 1
            self.stats.late_steps += late
            if mend is not None:
                self.stats.mended_rows += len(mend)
        if was != new.max_sample:
            log.info("job %s: sampling factor up to %d (was %d)%s", msg.job, new.max_sample,
                     was, ", reduced telemetry" if new.max_sample > 1 else "")
        if late:
            log.warning("job %s: %d sampling steps arrived after calls they cover; %d rows "
                        "mended from the detail ring", msg.job, late,
                        0 if mend is None else len(mend))
        if mend is not None and len(mend):
            self._add_columns(msg.job, msg.attempt, mend)

    def _detail(self, req: c4_pb2.DetailRequest) -> None:
        cap = min(req.max_records or self.config.detail_max_records,
                  self.config.detail_max_records)
        req.max_records = cap
        answer = self.ring.answer(req)
        out = c4_pb2.DetailBatch(job=req.job, attempt=req.attempt, fault_id=req.fault_id,
                                 request=req.request, host=self.host, status=answer.status,
                                 from_ns=req.from_ns, to_ns=req.to_ns,
                                 held_from_ns=answer.held_from_ns, truncated=answer.truncated)
        if answer.rows is not None:
            out.ops.CopyFrom(encode_ops(req.job, answer.rows, attempt=req.attempt))
        with self._lock:
            self.stats.detail_requests += 1
            if answer.status == c4_pb2.DetailBatch.GONE:
                self.stats.detail_refused += 1
            elif answer.status == c4_pb2.DetailBatch.PARTIAL:
                self.stats.detail_partial += 1
        if answer.status == c4_pb2.DetailBatch.GONE:
            log.info("detail request for fault %s: the ring no longer holds %d..%d (it holds "
                     "from %d); said so", req.fault_id, req.from_ns, req.to_ns,
                     answer.held_from_ns)
        self.emit(detail=out)

    # -- the tick -------------------------------------------------------------------------
    def tick(self) -> None:
        """Handle control messages; at each window's end, ship windows and port changes."""
        while True:
            try:
                msg = self._control.get_nowait()
            except queue.Empty:
                break
            try:
                self._handle(msg)
            except Exception:
                log.exception("could not handle a control message from the daemon")
        self.drain()
        now = self._clock()
        if now < self._next_window:
            return
        # next: when the watermark passes the end of the window it is in now
        w, lag = self.config.window_ns, int(self.config.lag_s * 1e9)
        self._next_window = ((now - lag) // w + 1) * w + lag
        self._windows(now)
        self._ports()
        self._evict()

    def _evict(self) -> None:
        """Jobs whose ranks have been silent for ``JOB_IDLE_S`` leave (their state with them)."""
        now = time.monotonic()
        with self._lock:
            for key in [k for k, st in self._jobs.items() if now - st.heard > JOB_IDLE_S]:
                log.info("job %s attempt %d silent for %.0f s: its edge state is dropped", *key,
                         JOB_IDLE_S)
                del self._jobs[key]

    def _windows(self, now: int) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for st in jobs:
            with self._lock:
                progress, links = st.windows(now)
            if progress is not None:
                with self._lock:
                    self.stats.progress_out += len(progress)
                self.emit(progress=encode_progress(st.job, progress, attempt=st.attempt))
            if links is not None:
                with self._lock:
                    self.stats.linkstat_out += len(links)
                self.emit(linkstats=encode_linkstats(st.job, links, attempt=st.attempt))

    def _ports(self) -> None:
        if self.ports is None:
            return
        try:
            changed = self.ports.poll()
        except Exception:
            log.exception("reading the NIC ports failed")
            return
        now = time.monotonic()
        with self._lock:
            # jobs whose ranks spoke lately: a job that ended gets no more port records
            jobs = [st for st in self._jobs.values() if now - st.heard < PORTS_IDLE_S]
        for st in jobs:
            rows = changed if st.ports_sent else self.ports.current()
            st.ports_sent = True
            if len(rows):
                with self._lock:
                    self.stats.ports_out += len(rows)
                self.emit(ports=encode_ports(st.job, rows, attempt=st.attempt))
