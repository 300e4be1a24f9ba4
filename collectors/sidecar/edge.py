"""Reduction at the edge: what the node's sidecar ships per job, by the job's sampling schedule.

Collectors ship every call over the Unix socket (cheap, local); the sidecar decides what leaves
the node. Per job attempt (:class:`EdgeJob`):

* With every factor 1 (no schedule, the default for small jobs) it ships what it always did:
  every op row and the raw socket counter samples (``ConnSampleBatch``).
* Once the daemon's schedule sets a factor above 1 (reduced mode) it ships the op rows of the
  sampled calls, every row not ok (errors) and every open row (a call pending past the
  collectors' ``C4_OPEN_AFTER``: last words) at once whatever the sampling, and the completion
  of a call that went out open; ``progress`` records from an :class:`EdgeReducer` fed every
  row, and ``linkstat`` records from the socket samples (:mod:`c4.reduce.links`)
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
from collections.abc import Callable
from dataclasses import dataclass, field

from c4.proto import c4_pb2
from c4.proto.codec import (
    Columns,
    encode_conns,
    encode_linkstats,
    encode_ops,
    encode_ports,
    encode_progress,
)
from c4.proto.health import HealthRecord, health_batch
from collectors.sidecar.edge_config import PORT_MODES, EdgeConfig
from collectors.sidecar.edge_job import EdgeJob
from collectors.sidecar.ports import PortWatch
from collectors.sidecar.ring import DetailRing
from collectors.sidecar.schedule import Schedule
from collectors.sidecar.spill import FrameRef

__all__ = ["PORT_MODES", "Edge", "EdgeConfig", "EdgeJob", "EdgeStats"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
Emit = Callable[..., None]        # Outbox.put(**body)
PutFrames = Callable[[list[FrameRef], c4_pb2.IngestRequest], None]   # Outbox.put_frames
AddRows = Callable[[Columns, FrameRef, int], None]                    # Batcher.add
PORTS_IDLE_S = 60.0      # a job whose ranks were silent this long gets no port records
JOB_IDLE_S = 600.0       # ... and this long: forgotten


@dataclass
class EdgeStats:
    """Counters of the edge, cumulative (reported in the sidecar's stats and metrics)."""

    ops_in: int = 0
    ops_out: int = 0
    progress_out: int = 0
    linkstat_out: int = 0
    conns_out: int = 0
    ports_out: int = 0
    health_out: int = 0
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


class Edge:
    """Every job on this node: called by the sidecar for frames, samples and ticks, and by the
    outbox for the daemon's control messages (handled on the tick thread)."""

    def __init__(self, host: str, config: EdgeConfig, emit: Emit, put_frames: PutFrames,
                 add_rows: AddRows, clock: Callable[[], int] = time.time_ns) -> None:
        self.host = host
        self.config = config
        self._emit_raw = emit
        self._put_frames = put_frames
        self._add_rows = add_rows
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

    def map_ports(self, discovered: dict[str, str]) -> None:
        """Port names -> topology NIC ids as discovery found them (``discovery.port_map``): in
        ``mapped`` mode these ports are read too, ``--nic-map`` entries overriding them."""
        if self.config.ports != "mapped":
            return
        mapping = {**discovered, **dict(self.config.nic_map)}
        if self.ports is None:
            if not mapping:
                return
            self.ports = PortWatch(self.host, sysfs_root=self.config.sysfs_root,
                                   nic_map=mapping, heartbeat_s=self.config.port_heartbeat_s,
                                   clock=self._clock)
        else:
            self.ports.nic_map = mapping   # one assignment: the tick thread sees old or new

    # -- what leaves the node -----------------------------------------------------------------
    def emit(self, **body: object) -> None:
        """Queue one ingest request, counting its records and bytes."""
        ((kind, msg),) = body.items()
        n = msg.ops.count if kind == "detail" else 0 if kind in ("rank", "group", "stats") \
            else len(msg.samples) if kind == "health" \
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
    def add(self, cols: Columns, frame: FrameRef, nbytes: int) -> None:
        """A collector's batch, decoded and logged (``Intake``): into the ring, then the rows
        to ship to the batcher, with their frame (which the log releases once the batch is
        acknowledged, whatever rows of it went)."""
        n = len(cols)
        job, attempt = frame.key
        self.ring.add(job, attempt, cols)
        with self._lock:
            self.stats.ops_in += n
            st = self.job(job, attempt)
            st.heard = time.monotonic()
            kept = st.take_ops(cols, (frame, nbytes, n))
        if kept is not None:
            self._add_rows(kept, frame, nbytes)

    def drain(self) -> None:
        """Judge the rows of reduced jobs received since the last call, ship the kept ones."""
        with self._lock:
            jobs = list(self._jobs.values())
        for st in jobs:
            with self._lock:
                parts = st.drain()
            for kept, (frame, nbytes, n) in parts:
                # a frame none of whose rows go still rides its job's next batch: the log
                # releases it when that batch is acknowledged
                self._add_rows(kept, frame, nbytes * len(kept) // max(n, 1))

    def emit_frames(self, frames: list[FrameRef], req: c4_pb2.IngestRequest) -> None:
        """The batcher's batches on their way to the outbox, counted."""
        n = req.ops.count
        with self._lock:
            self.stats.records_out += n
            self.stats.ops_out += n
            self.stats.bytes_out += req.ByteSize()
        self._put_frames(frames, req)

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
            self.emit(ops=encode_ops(msg.job, mend, attempt=msg.attempt))

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

    def add_health(self, records: list[HealthRecord]) -> int:
        """Ship one pass of node health to every job whose ranks spoke lately; the number of
        requests queued."""
        if not records:
            return 0
        now = time.monotonic()
        with self._lock:
            jobs = [st for st in self._jobs.values() if now - st.heard < PORTS_IDLE_S]
            self.stats.health_out += len(records) * len(jobs)
        for st in jobs:
            self.emit(health=health_batch(records, st.job, st.attempt))
        return len(jobs)

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
