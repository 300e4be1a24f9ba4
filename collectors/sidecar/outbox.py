"""Reliable, ordered delivery of ingest requests to the daemon.

Every request gets a (sidecar, seq) identity when it enters the outbox and, unless it is the
sidecar's own statistics (sent afresh every second), is in the write-ahead log (``spill.py``)
before it is queued. It is kept until the daemon acknowledges it. The requests themselves stay
in memory up to ``memory_max_bytes``; past that only where they are in the log is kept, and
they are read back when their turn comes, so a daemon away for long costs disk, not memory.
Requests go out in the order they were queued (those found in the log at start-up first), so
the daemon always sees a job's ranks before their records; one sent again after a restart
carries its first (sidecar, seq), so the daemon recognizes it if it stored it before.

A request that the daemon rejects (malformed, unknown job) is final: it is counted, with its
records, and dropped. A request refused with RESOURCE_EXHAUSTED for the sender's rate is not:
the sidecar stops sending, lets the stream finish, waits (backing off) and resends it in order.
One refused for a limit of its job alone (the ack names the job: ``parked_job``, e.g. one job
too many live) parks that job: its requests are set aside in order and resent, first refused
first, after a pause that doubles while the daemon keeps refusing it; the other jobs' requests
flow meanwhile. A request larger than the daemon takes is never sent (the daemon would break
the stream each time): it is counted and dropped.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.ratelog import RateLimitedLog
from c4.security.channel import ClientSecurity, open_channel
from collectors.sidecar.counters import Drops
from collectors.sidecar.errors import LogError
from collectors.sidecar.spill import FrameRef, Held, Recovered, Spill

log = logging.getLogger(__name__)

Key = tuple[str, int]
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_AUTH = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
# The daemon's default gRPC message limit is 64 MiB; stay well clear of it.
MAX_REQUEST_BYTES = 32 << 20
# Recovered frames never cut are batched afresh in batches of at most this many records.
RECOVERED_BATCH_RECORDS = 16384
# How long a job the daemon parks waits before its requests go again: doubling from the first
# to the last while the daemon keeps refusing it.
PARK_FIRST_S = 0.5
PARK_MAX_S = 30.0


def _job_of(req: c4_pb2.IngestRequest) -> str:
    """The job a request belongs to ("" for statistics and host internals)."""
    kind = req.WhichOneof("body")
    if kind is None or kind == "stats":
        return ""
    return str(getattr(getattr(req, kind), "job", ""))


@dataclass
class _Entry:
    sidecar: str
    seq: int
    kind: str
    records: int                          # op records in it (what its loss would cost)
    held: Held | None                     # its records in the log; None: memory only
    req: c4_pb2.IngestRequest | None      # None: to be read back from the log
    order: int = 0                        # position in the outbox's order
    size: int = 0                         # bytes of ``req`` counted against the memory bound
    job: str = ""                         # its job, once known ("" until read from the log)

    @property
    def key(self) -> Key:
        return (self.sidecar, self.seq)


@dataclass
class OutboxStats:
    queued: int = 0
    shipped: int = 0
    duplicates: int = 0
    rejected: int = 0
    spilled: int = 0     # requests read back from the log (memory was full, or after a restart)
    dropped: int = 0     # requests given up (their records are counted in Drops, by reason)
    reconnects: int = 0
    throttled: int = 0   # requests the daemon asked to resend later (over a limit)
    recovered: int = 0   # requests found in the log at start-up
    parked: int = 0      # requests set aside because the daemon parked their job


@dataclass
class _Parked:
    """A job the daemon refused for a limit of its own: its requests, in order, until when."""

    entries: list[_Entry]
    until: float
    delay: float


class Outbox:
    def __init__(self, sidecar_id: str, spill: Spill, *, memory_max_bytes: int,
                 max_inflight: int, spill_after_s: float | None = None,
                 security: ClientSecurity | None = None, drops: Drops | None = None,
                 max_request_bytes: int = MAX_REQUEST_BYTES,
                 on_control: Callable[[c4_pb2.Control], None] | None = None) -> None:
        # spill_after_s is accepted for older callers: every request is logged as it is queued,
        # so there is nothing left to spill when the daemon goes away.
        del spill_after_s
        self.sidecar_id = sidecar_id
        self.on_control = on_control  # the daemon's messages down the stream (seq 0)
        self.security = security
        self.spill = spill
        self.drops = drops or Drops()
        self.memory_max_bytes = memory_max_bytes
        self.max_inflight = max_inflight
        self.max_request_bytes = max_request_bytes
        self.stats = OutboxStats()
        self._cond = threading.Condition()
        self._seq = 0
        self._order = itertools.count()
        self._queue: deque[_Entry] = deque()             # not yet sent on this stream
        self._inflight: OrderedDict[Key, _Entry] = OrderedDict()
        self._memory = 0
        self._throttled = False  # the daemon refused a request for a limit on this stream
        self._parked: dict[str, _Parked] = {}   # job -> its requests held back
        self._park_delay: dict[str, float] = {}  # job -> its next pause (while refused)
        self.connected = False
        self._rated = RateLimitedLog(log)
        self._adopt(spill.recovery.requests, spill.recovery.frames)

    # -- producers ------------------------------------------------------------------------
    def put(self, **body: object) -> None:
        """Queue one request with the given body (``ops=...``, ``rank=...``, ...), logged first
        (except statistics)."""
        with self._cond:
            self._seq += 1
            req = c4_pb2.IngestRequest(sidecar=self.sidecar_id, seq=self._seq, **body)
            kind = req.WhichOneof("body") or "none"
            held = None
            if kind != "stats" and self.spill.logged:
                try:
                    held = self.spill.append_request(req)
                except LogError as exc:
                    self._rated.warning("unlogged", "request %d (%s) is held in memory only: %s",
                                        self._seq, kind, exc)
            records = req.ops.count if kind == "ops" else 0
            self._enqueue(_Entry(self.sidecar_id, self._seq, kind, records, held, req,
                                 job=_job_of(req)))

    def put_frames(self, frames: list[FrameRef], req: c4_pb2.IngestRequest | None) -> None:
        """Queue the batch made of these logged frames (``req``: it, already merged, or None
        to read it back from the log when its turn comes)."""
        with self._cond:
            self._seq += 1
            held = self.spill.append_cut(self.sidecar_id, self._seq, frames)
            if req is not None:
                req.sidecar, req.seq = self.sidecar_id, self._seq
            entry = _Entry(self.sidecar_id, self._seq, "ops", sum(f.records for f in frames),
                           held if self.spill.logged else None, req,
                           job=_job_of(req) if req is not None else "")
            self._enqueue(entry)

    def _adopt(self, requests: list[Recovered], frames: list[FrameRef]) -> None:
        """Queue what an earlier sidecar left in the log: its requests under their own
        (sidecar, seq), then its frames never batched, in new batches."""
        with self._cond:
            for r in requests:
                self._enqueue(_Entry(r.sidecar, r.seq, r.kind, r.records, r.held, None))
            self.stats.recovered = len(requests)
        batch: list[FrameRef] = []
        for frame in frames:
            if batch and (frame.key != batch[0].key or
                          sum(f.records for f in batch) + frame.records > RECOVERED_BATCH_RECORDS):
                self.put_frames(batch, None)
                batch = []
            batch.append(frame)
        if batch:
            self.put_frames(batch, None)

    def _enqueue(self, entry: _Entry) -> None:
        """Lock held."""
        entry.order = next(self._order)
        if entry.req is not None:
            size = entry.req.ByteSize()
            if self._memory + size <= self.memory_max_bytes:
                entry.size = size
                self._memory += size
            elif entry.held is not None and entry.held.loadable:
                entry.req = None  # read back from the log when its turn comes
            elif entry.kind != "stats":
                self._rated.warning("memory_full", "memory bound of %d bytes reached and "
                                    "request %d is not in the log: dropping it (%d records)",
                                    self.memory_max_bytes, entry.seq, entry.records)
                self._give_up(entry, "memory_full")
                return
        self._queue.append(entry)
        self.stats.queued += 1
        self._cond.notify_all()

    # -- state ------------------------------------------------------------------------------
    def pending(self) -> int:
        """Requests not yet acknowledged."""
        with self._cond:
            return len(self._queue) + len(self._inflight) + self._parked_count()

    def idle(self) -> bool:
        with self._cond:
            return not (self._queue or self._inflight or self._parked)

    def parked_jobs(self) -> dict[str, int]:
        """Jobs the daemon parked, with the requests held back for each."""
        with self._cond:
            return {job: len(p.entries) for job, p in self._parked.items()}

    def _parked_count(self) -> int:
        return sum(len(p.entries) for p in self._parked.values())

    def _drained(self) -> bool:
        """Nothing left to send but parked jobs' requests: what a stopping sidecar waits for
        (the daemon may park a job for long; the log keeps its requests for the next run, and
        ``abandon`` counts those only memory held)."""
        with self._cond:
            return not (self._queue or self._inflight)

    def memory_bytes(self) -> int:
        return self._memory

    # -- the stream -----------------------------------------------------------------------
    def _next(self, stop: threading.Event, broken: threading.Event) -> _Entry | None:
        while True:
            with self._cond:
                entry = self._take(stop, broken)
                if entry is None:
                    return None
            problem = self._ready(entry)  # may read the log: outside the lock
            with self._cond:
                if problem is None and entry.req is not None and not entry.job:
                    entry.job = _job_of(entry.req)
                if problem is None and entry.job in self._parked:
                    # read from the log only now: its job is parked, it waits with the others
                    if self._inflight.get(entry.key) is entry:
                        del self._inflight[entry.key]
                        if entry.size == 0 and entry.held is not None and entry.held.loadable:
                            entry.req = None
                        self._park(entry.job, entry)
                    continue
            if problem is None:
                return entry
            with self._cond:
                if self._inflight.get(entry.key) is entry:
                    del self._inflight[entry.key]
                    self._give_up(entry, problem)

    def _take(self, stop: threading.Event, broken: threading.Event) -> _Entry | None:
        """The next request to send, moved in flight; None when the stream should end."""
        while not stop.is_set() and not broken.is_set():
            if self._throttled:
                return None  # end this stream; the refused requests go again later
            self._release_parked()
            if len(self._inflight) < self.max_inflight and self._queue:
                entry = self._queue.popleft()
                if entry.job and entry.job in self._parked:
                    self._park(entry.job, entry)   # its job waits: the next one
                    continue
                self._inflight[entry.key] = entry
                return entry
            self._cond.wait(0.2)
        return None

    def _park(self, job: str, entry: _Entry) -> None:
        """Set ``entry`` aside with its job's other held-back requests, in order (lock
        held)."""
        parked = self._parked.get(job)
        if parked is None:
            if len(self._park_delay) > 4096:   # jobs parked and never taken: forget the pauses
                self._park_delay.clear()
            delay = self._park_delay.get(job, PARK_FIRST_S)
            self._park_delay[job] = min(delay * 2, PARK_MAX_S)
            parked = self._parked[job] = _Parked([], time.monotonic() + delay, delay)
        parked.entries.append(entry)
        if len(parked.entries) > 1 and parked.entries[-2].order > entry.order:
            parked.entries.sort(key=lambda e: e.order)
        self.stats.parked += 1

    def _release_parked(self) -> None:
        """Parked jobs whose pause is over go again, at the front, oldest request first; a
        job waits while any of its requests is still in flight (its refusal not yet heard)
        (lock held)."""
        if not self._parked:
            return
        now = time.monotonic()
        for job, parked in list(self._parked.items()):
            if parked.until > now or any(e.job == job for e in self._inflight.values()):
                continue
            del self._parked[job]
            self._queue.extendleft(reversed(parked.entries))
            log.info("resending %d requests of job %s, parked by the daemon for %.1f s",
                     len(parked.entries), job, parked.delay)

    def _ready(self, entry: _Entry) -> str | None:
        """Make the request sendable; the reason to give it up instead, if any."""
        if entry.req is None:
            assert entry.held is not None
            loaded = self.spill.load(entry.held, entry.sidecar, entry.seq)
            self.stats.spilled += 1
            if loaded.lost_records:
                self.drops.add("corrupt", records=loaded.lost_records)
                entry.records -= loaded.lost_records
            if loaded.request is None:
                return "corrupt"
            entry.req = loaded.request
        size = entry.req.ByteSize()
        if size > self.max_request_bytes:
            self._rated.warning("oversize", "request %s/%d (%s) is %d bytes, over the %d the "
                                "daemon takes (--max-request-bytes): dropped", entry.sidecar,
                                entry.seq, entry.kind, size, self.max_request_bytes)
            return "oversize"
        return None

    def _give_up(self, entry: _Entry, reason: str) -> None:
        """Drop a request for good, counted (lock held)."""
        self.stats.dropped += 1
        if entry.records:
            self.drops.add(reason, records=entry.records)
        self._finish(entry)

    def _finish(self, entry: _Entry) -> None:
        """The request is done with (lock held)."""
        if entry.size:
            self._memory -= entry.size
            entry.size = 0
        entry.req = None
        if entry.held is not None:
            self.spill.release(entry.held)
        self._cond.notify_all()

    def _ack(self, ack: c4_pb2.IngestAck) -> None:
        if ack.HasField("control"):
            if self.on_control is not None:
                self.on_control(ack.control)
            return
        with self._cond:
            key = (ack.sidecar, ack.seq)
            if ack.code == _EXHAUSTED and ack.parked_job and key in self._inflight:
                # Only its job is over a limit: that job waits, the others go on.
                entry = self._inflight.pop(key)
                entry.job = ack.parked_job
                if ack.parked_job not in self._parked:
                    self._rated.warning("parked", "the daemon parks job %s (request %d): %s",
                                        ack.parked_job, ack.seq, ack.error)
                self._park(ack.parked_job, entry)
                self._cond.notify_all()
                return
            if ack.code == _EXHAUSTED and key in self._inflight:
                # Not final: it stays in flight, and _reset_stream puts it back in order.
                if not self._throttled:
                    log.warning("daemon asks to slow down (request %d): %s", ack.seq, ack.error)
                self._throttled = True
                self.stats.throttled += 1
                self._cond.notify_all()
                return
            entry = self._inflight.pop(key, None)
            if entry is None:
                return
            if ack.code:
                self.stats.rejected += 1
                self._rated.warning("rejected", "daemon rejected request %d (%s, %d records): %s",
                                    ack.seq, entry.kind, entry.records, ack.error)
                if entry.records:
                    self.drops.add("rejected", records=entry.records)
                self._finish(entry)
                return
            if ack.duplicate:
                self.stats.duplicates += 1
            else:
                self.stats.shipped += 1
            if entry.job:
                self._park_delay.pop(entry.job, None)   # taken again: the next park starts short
            self._finish(entry)

    def _reset_stream(self) -> bool:
        """The stream ended: unacknowledged requests go back to the front, in order.
        Returns whether the daemon had asked to slow down."""
        with self._cond:
            back = sorted(self._inflight.values(), key=lambda e: e.order)
            self._inflight.clear()
            self._queue.extendleft(reversed(back))
            self.connected = False
            throttled, self._throttled = self._throttled, False
            self._cond.notify_all()
            return throttled

    def _requests(self, stop: threading.Event, broken: threading.Event
                  ) -> Iterator[c4_pb2.IngestRequest]:
        while True:
            entry = self._next(stop, broken)
            if entry is None:
                return
            req = entry.req
            if req is None:  # finished meanwhile (a reset raced with the log read)
                continue
            yield req

    def abandon(self) -> None:
        """The sidecar stops: count what only memory held (the log keeps the rest)."""
        with self._cond:
            parked = [e for p in self._parked.values() for e in p.entries]
            for entry in [*self._inflight.values(), *self._queue, *parked]:
                if entry.held is None and entry.kind != "stats" and entry.records:
                    self.drops.add("shutdown", records=entry.records)
                    self.stats.dropped += 1

    def run(self, address: str, stop: threading.Event, *, reconnect_max_s: float = 5.0,
            drain_on_stop: bool = True, unreachable_warn_s: float = 5.0) -> None:
        """Deliver until ``stop`` is set (then, if asked, until everything is acknowledged or
        the daemon cannot be reached: the log keeps the rest for the next run). A daemon out of
        reach for ``unreachable_warn_s`` is said at once, not only at shutdown."""
        backoff = 0.1
        slow_down = 0.0  # pause after the daemon refused us (limit or token), doubling
        unreachable_since = time.monotonic()
        said = False
        while True:
            if stop.is_set() and (not drain_on_stop or self._drained()):
                return
            channel = open_channel(address, self.security)
            try:
                grpc.channel_ready_future(channel).result(timeout=min(backoff * 4, 2.0))
            except grpc.FutureTimeoutError:
                channel.close()
                if stop.is_set():
                    log.warning("daemon unreachable at shutdown; %d requests stay in the log",
                                self.pending())
                    return
                quiet = time.monotonic() - unreachable_since
                if not said and quiet >= unreachable_warn_s:
                    said = True
                    log.warning("cannot reach the daemon at %s for %.0f s: telemetry waits in "
                                "the spill log (%d requests so far). Start `c4 daemon` there, "
                                "or fix --daemon / C4_DAEMON", address, quiet, self.pending())
                time.sleep(backoff)
                backoff = min(backoff * 2, reconnect_max_s)
                continue
            self.stats.reconnects += 1
            backoff = 0.1
            broken = threading.Event()
            finish = threading.Event()
            with self._cond:
                self.connected = True
            if said:
                log.warning("reached the daemon at %s after %.0f s", address,
                            time.monotonic() - unreachable_since)
            else:
                log.info("connected to the daemon at %s", address)
            stub = c4_pb2_grpc.IngestStub(channel)
            watcher = threading.Thread(target=self._finish_when_drained,
                                       args=(stop, finish, drain_on_stop), daemon=True)
            watcher.start()
            refused = False
            try:
                for ack in stub.Stream(self._requests(finish, broken)):
                    self._ack(ack)
                    if finish.is_set() and not self._inflight_count():
                        break
            except grpc.RpcError as exc:
                if exc.code() in _AUTH:
                    refused = True
                    log.error("the daemon refuses this sidecar (%s): %s", exc.code().name,
                              exc.details())
                elif exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    # the daemon holds as many streams as it can serve: reconnecting at once
                    # would only add to its load
                    refused = True
                    log.warning("the daemon is full (%s); retrying with backoff", exc.details())
                else:
                    log.warning("daemon stream broke (%s); reconnecting", exc.code())
            finally:
                broken.set()
                finish.set()
                channel.close()
                refused = self._reset_stream() or refused
                unreachable_since, said = time.monotonic(), False
            if refused and stop.is_set():
                return  # shutting down while the daemon refuses us: the log keeps the rest
            if refused:
                slow_down = min(max(slow_down * 2, 0.25), reconnect_max_s)
                time.sleep(slow_down)
            else:
                slow_down = 0.0

    def _inflight_count(self) -> int:
        with self._cond:
            return len(self._inflight)

    def _finish_when_drained(self, stop: threading.Event, finish: threading.Event,
                             drain: bool) -> None:
        while not finish.is_set():
            if stop.is_set() and (not drain or self._drained()):
                finish.set()
                return
            finish.wait(0.1)
