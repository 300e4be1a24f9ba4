"""Reliable, ordered delivery of ingest requests to the daemon.

Every request gets a (sidecar, seq) identity when it enters the outbox and is kept until the
daemon acknowledges it. While the daemon is unreachable, or when memory fills, everything
unacknowledged moves to the on-disk spill in order; after reconnecting, the spill is replayed
before anything newer, so the daemon always sees a job's ranks before their records. A request
that the daemon rejects (malformed, unknown job) is final: it is counted and dropped. A request
refused with RESOURCE_EXHAUSTED (over the daemon's per-sidecar rate or job limit) is not: the
sidecar stops sending, lets the stream finish, waits (backing off) and resends it in order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from collectors.sidecar.spill import Spill
from diagnosis.security.channel import ClientSecurity, open_channel
from proto import c4_pb2, c4_pb2_grpc

log = logging.getLogger(__name__)

Key = tuple[str, int]
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_AUTH = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


@dataclass
class _Entry:
    req: c4_pb2.IngestRequest
    size: int
    segment: Path | None  # the spill segment holding it, or None while only in memory


@dataclass
class OutboxStats:
    queued: int = 0
    shipped: int = 0
    duplicates: int = 0
    rejected: int = 0
    spilled: int = 0
    dropped: int = 0
    reconnects: int = 0
    throttled: int = 0  # requests the daemon asked to resend later (over a limit)


class Outbox:
    def __init__(self, sidecar_id: str, spill: Spill, *, memory_max_bytes: int,
                 max_inflight: int, spill_after_s: float,
                 security: ClientSecurity | None = None,
                 on_control: Callable[[c4_pb2.Control], None] | None = None) -> None:
        self.sidecar_id = sidecar_id
        self.on_control = on_control  # the daemon's messages down the stream (seq 0)
        self.security = security
        self.spill = spill
        self.memory_max_bytes = memory_max_bytes
        self.max_inflight = max_inflight
        self.spill_after_s = spill_after_s
        self.stats = OutboxStats()
        self._cond = threading.Condition()
        self._seq = 0
        self._queue: deque[_Entry] = deque()           # in memory, not yet sent on this stream
        self._replay: deque[_Entry] = deque()          # loaded from the spill, not yet sent
        self._inflight: OrderedDict[Key, _Entry] = OrderedDict()
        self._outstanding: dict[Path, set[Key]] = {}   # loaded segment -> keys not yet acked
        self._loaded: list[Path] = []                  # segments loaded on this stream
        self._memory = 0
        self._throttled = False  # the daemon refused a request for a limit on this stream
        self.connected = False

    # -- producers ------------------------------------------------------------------------
    def put(self, **body: object) -> None:
        """Queue one request with the given body (``ops=...``, ``rank=...``, ...)."""
        with self._cond:
            self._seq += 1
            req = c4_pb2.IngestRequest(sidecar=self.sidecar_id, seq=self._seq, **body)
            size = req.ByteSize()
            self._queue.append(_Entry(req, size, None))
            self._memory += size
            self.stats.queued += 1
            if self._memory > self.memory_max_bytes:
                self._spill_memory("memory limit reached")
            self._cond.notify_all()

    def pending(self) -> int:
        """Requests not yet acknowledged: in memory, plus one per spilled segment."""
        with self._cond:
            spilled = sum(1 for _ in self.spill.segments())
            return len(self._queue) + len(self._inflight) + len(self._replay) + spilled

    def idle(self) -> bool:
        with self._cond:
            return not (self._queue or self._inflight or self._replay or self.spill.segments())

    def spill_now(self, why: str) -> None:
        """Put every memory-only unacknowledged request on disk now (before a shutdown)."""
        with self._cond:
            self._spill_memory(why)

    def _spill_memory(self, why: str) -> None:
        """Move every memory-only unacknowledged request to one new segment, in seq order."""
        entries = sorted([e for e in self._inflight.values() if e.segment is None]
                         + list(self._queue), key=lambda e: e.req.seq)
        if not entries:
            return
        dropped = self.spill.append([e.req for e in entries])
        kept = entries[:len(entries) - dropped]
        self.stats.spilled += len(kept)
        self.stats.dropped += dropped
        segment = self.spill.segments()[-1] if kept else None
        log.info("spilled %d requests to disk (%s)", len(kept), why)
        queued = {id(e) for e in self._queue}
        self._queue.clear()
        self._memory = 0
        if segment is None:
            return
        keys = {(e.req.sidecar, e.req.seq) for e in kept}
        for e in kept:
            e.segment = segment
        if self.connected:
            # This stream goes on with the spilled requests it has not sent yet.
            self._outstanding[segment] = keys
            self._loaded.append(segment)
            self._replay.extend(e for e in kept if id(e) in queued)

    # -- the stream -----------------------------------------------------------------------
    def _next(self, stop: threading.Event, broken: threading.Event) -> _Entry | None:
        with self._cond:
            while not stop.is_set() and not broken.is_set():
                if self._throttled:
                    return None  # end this stream; the refused requests go again later
                if len(self._inflight) < self.max_inflight:
                    if not self._replay:
                        self._load_segment()
                    source = self._replay or (self._queue if not self._more_segments() else None)
                    if source:
                        entry = source.popleft()
                        self._inflight[(entry.req.sidecar, entry.req.seq)] = entry
                        return entry
                self._cond.wait(0.2)
            return None

    def _more_segments(self) -> bool:
        return any(p not in self._loaded for p in self.spill.segments())

    def _load_segment(self) -> None:
        for path in self.spill.segments():
            if path in self._loaded:
                continue
            entries = [_Entry(r, r.ByteSize(), path) for r in self.spill.read(path)]
            self._loaded.append(path)
            keys = {(e.req.sidecar, e.req.seq) for e in entries}
            if not keys:
                self.spill.remove(path)
                continue
            self._outstanding[path] = keys
            self._replay.extend(entries)
            return

    def _ack(self, ack: c4_pb2.IngestAck) -> None:
        if ack.HasField("control"):
            if self.on_control is not None:
                self.on_control(ack.control)
            return
        with self._cond:
            key = (ack.sidecar, ack.seq)
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
                log.error("daemon rejected request %d (%s): %s", ack.seq,
                          entry.req.WhichOneof("body"), ack.error)
            elif ack.duplicate:
                self.stats.duplicates += 1
            else:
                self.stats.shipped += 1
            if entry.segment is None:
                self._memory -= entry.size
            else:
                keys = self._outstanding.get(entry.segment)
                if keys is not None:
                    keys.discard((ack.sidecar, ack.seq))
                    if not keys:
                        del self._outstanding[entry.segment]
                        self.spill.remove(entry.segment)
            self._cond.notify_all()

    def _reset_stream(self) -> bool:
        """The stream ended: unacknowledged memory requests go back to the front, in order.
        Returns whether the daemon had asked to slow down."""
        with self._cond:
            back = [e for e in self._inflight.values() if e.segment is None]
            self._inflight.clear()
            self._queue = deque(sorted(back + list(self._queue), key=lambda e: e.req.seq))
            self._replay.clear()
            self._outstanding.clear()
            self._loaded.clear()
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
            yield entry.req

    def run(self, address: str, stop: threading.Event, *, reconnect_max_s: float = 5.0,
            drain_on_stop: bool = True) -> None:
        """Deliver until ``stop`` is set (then, if asked, until everything is acknowledged)."""
        backoff = 0.1
        slow_down = 0.0  # pause after the daemon refused us (limit or token), doubling
        down_since = time.monotonic()
        while True:
            if stop.is_set() and (not drain_on_stop or self.idle()):
                return
            channel = open_channel(address, self.security)
            try:
                grpc.channel_ready_future(channel).result(timeout=min(backoff * 4, 2.0))
            except grpc.FutureTimeoutError:
                channel.close()
                if stop.is_set() and drain_on_stop and time.monotonic() - down_since > 5.0:
                    log.warning("daemon unreachable at shutdown; %d requests stay spilled",
                                self.pending())
                    with self._cond:
                        self._spill_memory("shutting down without a daemon")
                    return
                if time.monotonic() - down_since > self.spill_after_s:
                    with self._cond:
                        self._spill_memory("daemon unreachable")
                time.sleep(backoff)
                backoff = min(backoff * 2, reconnect_max_s)
                continue
            self.stats.reconnects += 1
            backoff = 0.1
            broken = threading.Event()
            finish = threading.Event()
            with self._cond:
                self.connected = True
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
                down_since = time.monotonic()
            if refused and stop.is_set():
                # Shutting down while the daemon refuses us: keep the rest on disk for later.
                with self._cond:
                    self._spill_memory("shutting down while the daemon refuses requests")
                return
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
            if stop.is_set() and (not drain or self.idle()):
                finish.set()
                return
            finish.wait(0.1)
