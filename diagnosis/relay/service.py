"""The relay's Ingest service: sidecar streams in, each riding one stream to the daemon.

Acknowledgements are routed by the sidecar id they echo, to the stream that sidecar last sent
on. Control messages are routed as the daemon routes them to its own streams
(``diagnosis.daemon.control.ControlHub``, reused here for the sidecar streams): a schedule to
every stream of its job (and to a stream that first carries the job later), a detail request
to the streams of the hosts of the ranks it names, an inspection to the stream of its host.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.proto.codec import BatchError, collector_counts
from diagnosis.daemon.control import ControlHub
from diagnosis.daemon.decoding import Undecodable
from diagnosis.daemon.slots import Slots
from diagnosis.relay.upstream import Upstream

log = logging.getLogger(__name__)

#: (job, attempt, rank) -> host, from the RankInfo and statistics that passed: where detail
#: requests go. Bounded; the ranks not heard of longest are forgotten first.
MAX_RANKS = 1 << 20


@dataclass(eq=False)
class _Down:
    """One sidecar stream."""

    link: Upstream
    generation: int
    acks: queue.Queue[c4_pb2.IngestAck | None] = field(default_factory=queue.Queue)
    outstanding: int = 0
    done: bool = False
    lost: str = ""
    bad: str = ""


class RelayService(c4_pb2_grpc.IngestServicer):
    def __init__(self, max_streams: int, stop: threading.Event) -> None:
        self.hub = ControlHub()
        self.slots = Slots(max_streams)
        self.links: list[Upstream] = []
        self._stop = stop
        self._lock = threading.Lock()
        self._owners: dict[str, _Down] = {}
        self._downs: set[_Down] = set()
        self._hosts: OrderedDict[tuple[str, int, int], str] = OrderedDict()

    # -- from the daemon (a link's thread) ------------------------------------------------
    def on_ack(self, ack: c4_pb2.IngestAck) -> None:
        with self._lock:
            down = self._owners.get(ack.sidecar)
            if down is not None:
                down.outstanding -= 1
        if down is not None:
            down.acks.put(ack)
        else:   # its sidecar left; it resends what it lacks an acknowledgement for
            log.debug("relay: acknowledgement for absent sidecar %r dropped", ack.sidecar)

    def on_control(self, control: c4_pb2.Control) -> None:
        kind = control.WhichOneof("body")
        if kind == "schedule":
            self.hub.publish(control.schedule)
        elif kind == "group":
            self.hub.to_job(control.group.job, control.group.attempt, control)
        elif kind == "detail":
            req = control.detail
            if req.ranks:
                with self._lock:
                    hosts = {h for r in req.ranks
                             if (h := self._hosts.get((req.job, req.attempt, r))) is not None}
                self.hub.request_detail(req, hosts)
            else:
                self.hub.to_job(req.job, req.attempt, control)
        elif kind == "inspect":
            self.hub.request_inspect(control.inspect)
        else:
            log.warning("relay: control message with body %r from the daemon (a newer daemon?) "
                        "cannot be routed: dropped", kind)

    def on_lost(self, link: Upstream, generation: int, reason: str) -> None:
        """End every sidecar stream that rode the lost connection: their sidecars resend."""
        with self._lock:
            downs = [d for d in self._downs if d.link is link and d.generation == generation]
        for d in downs:
            d.lost = (f"the relay's stream to the daemon at {link.address} broke ({reason}): "
                      "resend what is unacknowledged")
            d.acks.put(None)

    # -- sidecar streams ------------------------------------------------------------------
    def Send(self, request: c4_pb2.IngestRequest, context: grpc.ServicerContext
             ) -> c4_pb2.IngestAck:
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "a relay carries ingest streams only (Ingest.Stream): send single "
                      "requests to the daemon itself")
        raise AssertionError("unreachable")   # abort raises

    def Stream(self, request_iterator: Iterator[c4_pb2.IngestRequest],
               context: grpc.ServicerContext) -> Iterator[c4_pb2.IngestAck]:
        if not self.slots.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the relay already carries {self.slots.limit} sidecar streams (its "
                          "--max-streams): retry later with backoff, or spread the sidecars "
                          "over more relays")
        try:
            yield from self._stream(request_iterator, context)
        finally:
            self.slots.give()

    def _pick(self) -> tuple[Upstream, int] | None:
        """The connected link carrying the fewest sidecar streams, and its generation."""
        with self._lock:
            load = {id(link): 0 for link in self.links}
            for d in self._downs:
                load[id(d.link)] += 1
        best = None
        for link in sorted(self.links, key=lambda x: load[id(x)]):
            up, generation = link.state()
            if up:
                best = (link, generation)
                break
        return best

    def _note(self, req: c4_pb2.IngestRequest, down: _Down) -> None:
        kind = req.WhichOneof("body")
        keys: list[tuple[str, int, int]] = []
        host = ""
        if kind == "rank" and req.rank.host:
            keys, host = [(req.rank.job, req.rank.attempt, req.rank.rank)], req.rank.host
        elif kind == "stats" and req.stats.host:
            # every second, each rank's counters name its host: a relay started after its
            # ranks registered learns where they are from these
            host = req.stats.host
            try:
                keys = [(job, attempt, r) for job, attempt, cols in collector_counts(req.stats)
                        for r in cols["rank"].tolist()]
            except BatchError:   # the daemon says what is wrong with it
                keys = []
        with self._lock:
            self._owners[req.sidecar] = down
            down.outstanding += 1
            for key in keys:
                self._hosts[key] = host
                self._hosts.move_to_end(key)
            while len(self._hosts) > MAX_RANKS:
                self._hosts.popitem(last=False)

    def _stream(self, request_iterator: Iterator[c4_pb2.IngestRequest],
                context: grpc.ServicerContext) -> Iterator[c4_pb2.IngestAck]:
        picked = self._pick()
        if picked is None:
            why = sorted({link.last_lost for link in self.links if link.last_lost})
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          "the relay has no stream to the daemon at the moment"
                          + (f" (the last ended: {'; '.join(why)})" if why else "")
                          + ": retry with backoff")
            return
        down = _Down(*picked)
        with self._lock:
            self._downs.add(down)
        sid = self.hub.open(down.acks.put)

        def read() -> None:
            try:
                for n, req in enumerate(request_iterator, 1):
                    if isinstance(req, Undecodable):
                        down.bad = req.message(f"request {n} on this stream")
                        break
                    self._note(req, down)
                    self.hub.seen(sid, req)
                    if not down.link.send(req, down.generation, self._stop):
                        # the connection went (on_lost may have missed a stream that had just
                        # picked it): end this stream either way
                        down.lost = down.lost or (
                            f"the relay's stream to the daemon at {down.link.address} ended: "
                            "resend what is unacknowledged")
                        break
            except Exception as exc:  # the sidecar went away
                log.debug("relay: sidecar stream ended: %s", exc)
            finally:
                self.hub.close(sid)
                down.done = True
                down.acks.put(None)

        threading.Thread(target=read, name="c4-relay-reader", daemon=True).start()
        try:
            while context.is_active():
                try:
                    ack = down.acks.get(timeout=0.5)
                except queue.Empty:
                    ack = None
                if ack is not None:
                    yield ack
                if down.lost and down.acks.empty():   # the answers it got go out first
                    context.abort(grpc.StatusCode.UNAVAILABLE, down.lost)
                if down.done and down.acks.empty():
                    if down.bad:
                        context.abort(grpc.StatusCode.INVALID_ARGUMENT, down.bad)
                    with self._lock:
                        settled = down.outstanding <= 0
                    if settled or self._stop.is_set():
                        return
        finally:
            with self._lock:
                self._downs.discard(down)
                for sidecar in [s for s, d in self._owners.items() if d is down]:
                    del self._owners[sidecar]
