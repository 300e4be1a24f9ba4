"""The Ingest service: validate each request, hand it to the writer, acknowledge once stored.

Per-sender limits are keyed by who the caller is (``diagnosis.security.identity``: certificate,
checked token, peer address), never by the sidecar id a request declares; the table of sidecars
seen is bounded too, so a sender that invents ids cannot grow the daemon's memory."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc

from diagnosis.daemon.control import ControlHub
from diagnosis.daemon.decode import Rejected, to_write
from diagnosis.daemon.limits import RateLimiter
from diagnosis.daemon.writer import Writer
from diagnosis.security.identity import sender_identity
from proto import c4_pb2, c4_pb2_grpc

log = logging.getLogger(__name__)

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
# Sidecars remembered for ``c4 status``: the most recently heard from.
MAX_SIDECARS = 4096


@dataclass
class SidecarInfo:
    sidecar: str
    host: str
    last_seen_ns: int
    stats: c4_pb2.SidecarStats | None = None
    rank_hosts: set[str] = field(default_factory=set)   # hosts its ranks say they are on
    declared: bool = False                              # host from its own statistics
    warned: bool = False


class IngestService(c4_pb2_grpc.IngestServicer):
    def __init__(self, writer: Writer, known_jobs: set[str], *, max_records: int,
                 limiter: RateLimiter | None = None, max_jobs: int = 0,
                 observe_ack: Callable[[float], None] | None = None,
                 tokens_checked: bool = False, max_sidecars: int = MAX_SIDECARS,
                 max_streams: int = 0,
                 on_stats: Callable[[c4_pb2.SidecarStats], None] | None = None,
                 control: ControlHub | None = None,
                 on_host: Callable[[c4_pb2.HostTopology, str], object] | None = None) -> None:
        self._writer = writer
        self.control = control or ControlHub()
        self._known = known_jobs
        self._max_records = max_records
        self._limiter = limiter or RateLimiter(0)
        self._max_jobs = max_jobs  # 0: no limit
        self._observe_ack = observe_ack
        self._tokens_checked = tokens_checked
        self._max_sidecars = max_sidecars
        self._max_streams = max_streams  # 0: no limit
        self._on_stats = on_stats
        self._on_host = on_host   # a host's discovered internals: kept at once, not batched
        # answers to the inspections the daemon asked sidecars for (daemon.inspection)
        self.on_inspection: Callable[[c4_pb2.InspectResult], None] | None = None
        self.streams = 0
        self._lock = threading.Lock()
        self.sidecars: OrderedDict[str, SidecarInfo] = OrderedDict()
        self.rejected = 0
        self.rejected_by_code: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.unacked = 0

    def job_count(self) -> int:
        with self._lock:
            return len(self._known)

    # -- one request ---------------------------------------------------------------------
    def sender(self, context: grpc.ServicerContext) -> str:
        """The key of the caller's limits."""
        return sender_identity(context, tokens_checked=self._tokens_checked)

    def _accept(self, req: c4_pb2.IngestRequest, reply: Callable[[c4_pb2.IngestAck], None],
                sender: str, stream: int = 0) -> None:
        """Reply now (rejected, or statistics) or once the request is stored."""
        t0 = time.perf_counter()
        kind = req.WhichOneof("body") or "none"
        with self._lock:
            self.received[kind] = self.received.get(kind, 0) + 1
        try:
            if not self._limiter.allow(sender):
                raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"sender {sender} (sidecar {req.sidecar!r}) is over the daemon's "
                               f"limit of {self._limiter.describe()}: retry later with backoff")
            self._seen(req)
            if kind == "stats":
                if self._on_stats is not None:
                    self._on_stats(req.stats)
                if stream:
                    self.control.seen(stream, req)
                reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar))
                return
            if kind == "inspection":
                # a sidecar's answer to an inspection request: evidence for a report, not
                # telemetry to store
                if not self.control.expected(req.inspection.request) \
                        or self.on_inspection is None:
                    raise Rejected(grpc.StatusCode.FAILED_PRECONDITION,
                                   f"inspection {req.inspection.request} was not asked for (or "
                                   "long ago): dropped")
                self.on_inspection(req.inspection)
                reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar))
                return
            if kind == "host_topology":
                if self._on_host is None:
                    raise Rejected(grpc.StatusCode.UNIMPLEMENTED,
                                   "this daemon does not keep host topologies")
                self._on_host(req.host_topology, req.sidecar)
                if stream:
                    self.control.seen(stream, req)
                reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar))
                return
            if kind == "detail" and not self.control.expected(req.detail.request):
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION,
                               f"detail for request {req.detail.request} from host "
                               f"{req.detail.host!r} was not asked for (or long ago): dropped")
            with self._lock:
                write = to_write(req, self._known, max_records=self._max_records)
                if kind == "rank" and req.rank.job not in self._known:
                    if self._max_jobs and len(self._known) >= self._max_jobs:
                        raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                       f"the daemon already tracks {len(self._known)} jobs (its "
                                       f"--max-jobs limit): job {req.rank.job!r} is refused; "
                                       "raise --max-jobs or remove old jobs from the store")
                    self._known.add(req.rank.job)
                self.unacked += 1
            if stream:
                self.control.seen(stream, req)
        except Rejected as exc:
            with self._lock:
                self.rejected += 1
                self.rejected_by_code[exc.code.name] = \
                    self.rejected_by_code.get(exc.code.name, 0) + 1
            log.warning("rejected request %d from %s (%s): %s", req.seq, req.sidecar, sender,
                        exc.message)
            reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar, code=exc.code.value[0],
                                    error=exc.message))
            return
        seq, sidecar = req.seq, req.sidecar

        def done(dup: bool) -> None:
            with self._lock:
                self.unacked -= 1
            if self._observe_ack is not None:
                self._observe_ack(time.perf_counter() - t0)
            reply(c4_pb2.IngestAck(seq=seq, sidecar=sidecar, duplicate=dup))

        self._writer.submit(write, done)

    def _seen(self, req: c4_pb2.IngestRequest) -> None:
        if not req.sidecar:
            return
        with self._lock:
            info = self.sidecars.get(req.sidecar)
            if info is None:
                info = self.sidecars[req.sidecar] = SidecarInfo(req.sidecar, "", 0)
                if len(self.sidecars) > self._max_sidecars:
                    self.sidecars.popitem(last=False)  # the one silent longest
            else:
                self.sidecars.move_to_end(req.sidecar)
            info.last_seen_ns = time.time_ns()
            if req.WhichOneof("body") == "stats":
                info.stats = req.stats
                info.host = req.stats.host
                info.declared = bool(req.stats.host)
            elif req.WhichOneof("body") == "rank":
                if not info.host:
                    info.host = req.rank.host
                if len(info.rank_hosts) < 64:
                    info.rank_hosts.add(req.rank.host)
            elif req.WhichOneof("body") == "host_topology":
                info.host = req.host_topology.host
                info.declared = bool(req.host_topology.host)
            others = info.rank_hosts - {info.host} if info.declared and not info.warned \
                else set()
            if others:
                info.warned = True
        if others:
            # one node, two names: reports name one, the topology and the isolation the other
            log.warning("sidecar %s runs with --host %r but ranks it carries say they are on "
                        "%s: give both the topology's host id (the sidecar's --host, the ranks' "
                        "C4_HOST)", req.sidecar, info.host, ", ".join(map(repr, sorted(others))))

    # -- RPCs --------------------------------------------------------------------------------
    def Send(self, request: c4_pb2.IngestRequest, context: grpc.ServicerContext
             ) -> c4_pb2.IngestAck:
        box: queue.Queue[c4_pb2.IngestAck] = queue.Queue(maxsize=1)
        self._accept(request, box.put, self.sender(context))
        ack = box.get()
        if ack.code:
            context.abort(_CODES.get(ack.code, grpc.StatusCode.UNKNOWN), ack.error)
        return ack

    def Stream(self, request_iterator: Iterator[c4_pb2.IngestRequest],
               context: grpc.ServicerContext) -> Iterator[c4_pb2.IngestAck]:
        with self._lock:
            full = bool(self._max_streams) and self.streams >= self._max_streams
            if not full:
                self.streams += 1
        if full:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the daemon already serves {self._max_streams} ingest streams (its "
                          "max_streams limit, one per sidecar): retry later with backoff; "
                          "shard the sidecars over several daemons or raise workers and "
                          "max_streams")
        try:
            yield from self._stream(request_iterator, context)
        finally:
            with self._lock:
                self.streams -= 1

    def _stream(self, request_iterator: Iterator[c4_pb2.IngestRequest],
                context: grpc.ServicerContext) -> Iterator[c4_pb2.IngestAck]:
        acks: queue.Queue[c4_pb2.IngestAck | None] = queue.Queue()
        sender = self.sender(context)
        state = {"outstanding": 0, "done": False, "throttled": False}
        lock = threading.Lock()

        def reply(ack: c4_pb2.IngestAck) -> None:
            with lock:
                state["outstanding"] -= 1
            acks.put(ack)

        def refuse_after_limit(ack: c4_pb2.IngestAck) -> None:
            if ack.code == _EXHAUSTED:
                state["throttled"] = True
            reply(ack)

        stream = self.control.open(acks.put)

        def read() -> None:
            try:
                for req in request_iterator:
                    with lock:
                        state["outstanding"] += 1
                    if state["throttled"]:
                        # Once one request is refused for a limit, so is everything after it
                        # on this stream: the sidecar resends them in order, and a job's
                        # records never overtake its refused RankInfo.
                        reply(c4_pb2.IngestAck(
                            seq=req.seq, sidecar=req.sidecar, code=_EXHAUSTED,
                            error="an earlier request on this stream was over a limit: "
                                  "retry later with backoff"))
                        continue
                    self._accept(req, refuse_after_limit, sender, stream)
            except Exception as exc:  # the client went away; stored requests stay stored
                log.debug("ingest stream ended: %s", exc)
            finally:
                self.control.close(stream)
                with lock:
                    state["done"] = True
                acks.put(None)

        threading.Thread(target=read, name="c4-ingest-reader", daemon=True).start()
        while context.is_active():
            try:
                ack = acks.get(timeout=0.5)
            except queue.Empty:
                continue
            if ack is not None:
                yield ack
            with lock:
                finished = state["done"] and state["outstanding"] == 0
            if finished and acks.empty():
                return

