"""One stream from the relay to the daemon, reconnected whenever it ends.

Requests are sent in the order they were queued. Each connection has a generation: a sidecar
stream is tied to the generation it started on, and once that connection is gone it may not
queue any more (what it queued may or may not have reached the daemon; its sidecar resends
everything unacknowledged, and the daemon recognises what it had stored).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import grpc

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.security.channel import ClientSecurity, open_channel

log = logging.getLogger(__name__)

OnAck = Callable[[c4_pb2.IngestAck], None]
OnControl = Callable[[c4_pb2.Control], None]
#: (link, generation lost, why)
OnLost = Callable[["Upstream", int, str], None]
_FIRST_BACKOFF_S = 0.1
# a connection that lasted this long resets the backoff
_STEADY_S = 10.0
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


class Upstream:
    def __init__(self, index: int, address: str, *, on_ack: OnAck, on_control: OnControl,
                 on_lost: OnLost, queue_max: int, reconnect_max_s: float,
                 security: ClientSecurity | None = None,
                 options: list[tuple[str, Any]] | None = None) -> None:
        self.index = index
        self.address = address
        self._on_ack = on_ack
        self._on_control = on_control
        self._on_lost = on_lost
        self._queue_max = queue_max
        self._reconnect_max_s = reconnect_max_s
        self._options = options or []
        self._security = security
        self._lock = threading.Lock()
        self._queue: queue.Queue[c4_pb2.IngestRequest] = queue.Queue(queue_max)
        self._generation = 0
        self._up = False
        #: why the last connection ended ("" before any did)
        self.last_lost = ""

    def state(self) -> tuple[bool, int]:
        """(connected, generation)."""
        with self._lock:
            return self._up, self._generation

    def send(self, req: c4_pb2.IngestRequest, generation: int, stop: threading.Event) -> bool:
        """Queue ``req`` for the daemon on connection ``generation``, waiting while the queue
        is full; False once that connection is gone (or the relay stops)."""
        while not stop.is_set():
            with self._lock:
                if not self._up or self._generation != generation:
                    return False
                q = self._queue
            try:
                q.put(req, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def run(self, stop: threading.Event) -> None:
        """Connect, carry, and reconnect (backing off) until ``stop`` is set."""
        channel = open_channel(self.address, self._security, options=self._options)
        stub = c4_pb2_grpc.IngestStub(channel)
        backoff = _FIRST_BACKOFF_S
        try:
            while not stop.is_set():
                try:
                    grpc.channel_ready_future(channel).result(timeout=self._reconnect_max_s)
                except FutureTimeout:
                    log.warning("relay: the daemon at %s is not reachable; retrying",
                                self.address)
                    continue
                began = time.monotonic()
                reason, throttled = self._carry(stub, stop)
                if stop.is_set():
                    break
                if not throttled and time.monotonic() - began > _STEADY_S:
                    backoff = _FIRST_BACKOFF_S
                log.warning("relay: stream %d to the daemon ended (%s); the sidecars it "
                            "carried resend through a new one", self.index, reason)
                stop.wait(backoff)
                backoff = min(backoff * 2, self._reconnect_max_s)
        finally:
            channel.close()

    def _carry(self, stub: c4_pb2_grpc.IngestStub, stop: threading.Event
               ) -> tuple[str, bool]:
        """Carry one connection until it ends: (why, whether the daemon throttled it)."""
        q: queue.Queue[c4_pb2.IngestRequest] = queue.Queue(self._queue_max)
        ended = threading.Event()
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._queue = q
            self._up = True
        call = stub.Stream(self._requests(q, ended, stop))
        reason, throttled = "the daemon ended it", False
        try:
            for ack in call:
                if ack.seq == 0 and ack.HasField("control"):
                    self._on_control(ack.control)
                    continue
                self._on_ack(ack)
                if ack.code == _EXHAUSTED and not ack.parked_job:
                    # the daemon refuses everything after this on the stream: start afresh
                    # after the backoff, as a sidecar would (its sidecars resend meanwhile)
                    reason = ("the daemon asked the relay to slow down: raise its "
                              "--max-requests-per-second to about 4 per node behind relays, "
                              "or 0")
                    throttled = True
                    break
        except grpc.RpcError as exc:
            reason = f"{exc.code().name}: {exc.details()}"
        finally:
            with self._lock:
                self._up = False
            ended.set()
            call.cancel()
            self.last_lost = reason
            self._on_lost(self, generation, reason)
        return reason, throttled

    def _requests(self, q: queue.Queue[c4_pb2.IngestRequest], ended: threading.Event,
                  stop: threading.Event) -> Iterator[c4_pb2.IngestRequest]:
        while not (ended.is_set() or stop.is_set()):
            try:
                req = q.get(timeout=0.2)
            except queue.Empty:
                continue
            yield req
