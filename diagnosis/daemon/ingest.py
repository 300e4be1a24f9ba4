"""The Ingest service: validate each request, hand it to the writer, acknowledge once stored.

Per-sender limits are keyed by who the caller is (``c4.security.identity``: certificate,
checked token, peer address), never by the sidecar id a request declares; the table of sidecars
seen is bounded too, so a sender that invents ids cannot grow the daemon's memory.

At the door a request is checked against ``bounds`` (``decode``) and then against what its job
may hold (``jobs.JobBook``). A refusal for a sender's limit slows the whole stream down (every
later request on it is refused too, so the sidecar resends in order); a refusal for a job's
limit (``parked_job``) parks only that job on the stream: its later requests are refused until
the sidecar resends the first refused one, and the other jobs' requests flow meanwhile.
Refusals are counted and logged at most once per interval per kind."""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
from prometheus_client import Histogram

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.proto.codec import BatchError
from c4.ratelog import RateLimitedLog
from c4.security.identity import sender_identity
from diagnosis.daemon.bounds import Bounds
from diagnosis.daemon.control import ControlHub, request_job
from diagnosis.daemon.decode import Rejected, to_write
from diagnosis.daemon.decoding import Undecodable
from diagnosis.daemon.group_parts import GroupParts
from diagnosis.daemon.jobs import JobBook
from diagnosis.daemon.limits import RateLimiter
from diagnosis.daemon.slots import Slots
from diagnosis.daemon.writer import LATENCY_BUCKETS, Writer
from diagnosis.store import GroupRecord, RankRecord, Write

log = logging.getLogger(__name__)

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
# Sidecars remembered for ``c4 status``: the most recently heard from.
MAX_SIDECARS = 4096
# Reads a job's registrations back from the store (a job known from before a restart).
Seed = Callable[[str], tuple[list[RankRecord], list[GroupRecord]]]


@dataclass
class _StreamState:
    outstanding: int = 0       # requests read and not yet answered
    done: bool = False         # the client finished sending (or went away)
    throttled: bool = False    # a request was refused for the sender's limit
    bad: str = ""              # why a request did not parse: the stream ends with it


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
    def __init__(self, writer: Writer, jobs: JobBook, *, max_records: int,
                 bounds: Bounds | None = None, limiter: RateLimiter | None = None,
                 tokens_checked: bool = False, max_sidecars: int = MAX_SIDECARS,
                 max_streams: int = 0,
                 on_stats: Callable[[c4_pb2.SidecarStats], None] | None = None,
                 control: ControlHub | None = None, seed: Seed | None = None,
                 on_host: Callable[[c4_pb2.HostTopology, str], object] | None = None) -> None:
        self._writer = writer
        self.control = control or ControlHub()
        self.jobs = jobs
        self._seed = seed
        self._bounds = bounds or Bounds()
        self._max_records = max_records
        # communicators that sidecars know only in parts (NCCL's telemetry), joined here
        self._parts = GroupParts(self._bounds.max_ranks)
        self._limiter = limiter or RateLimiter(0)
        self._rated = RateLimitedLog(log)
        #: from receiving a request to acknowledging it (``component_metrics``)
        self.ack_seconds = Histogram(
            "c4_daemon_ack_latency_seconds",
            "From receiving an ingest request to acknowledging it as stored.",
            buckets=LATENCY_BUCKETS, registry=None)
        self._tokens_checked = tokens_checked
        self._max_sidecars = max_sidecars
        self.slots = Slots(max_streams or 1 << 30)
        # set when the daemon stops: a stream ends once what it took is acknowledged, rather
        # than holding the daemon's shutdown for the server's whole grace period
        self._closing = threading.Event()
        self._on_stats = on_stats
        self._on_host = on_host   # a host's discovered internals: kept at once, not batched
        # answers to the inspections the daemon asked sidecars for (daemon.inspection)
        self.on_inspection: Callable[[c4_pb2.InspectResult], None] | None = None
        self._lock = threading.Lock()
        self.sidecars: OrderedDict[str, SidecarInfo] = OrderedDict()
        self.rejected = 0
        self.rejected_by_code: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.unacked = 0

    def job_count(self) -> int:
        """Jobs known (registered and neither removed nor aged out)."""
        return self.jobs.known()

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
                    try:
                        self._on_stats(req.stats)
                    except BatchError as exc:
                        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"SidecarStats: {exc}") from exc
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
            if kind == "group" and GroupParts.is_part(req.group):
                joined = self._join(req, stream)
                if joined is None:
                    reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar))
                    return
                write = joined
            else:
                write = to_write(req, max_records=self._max_records, bounds=self._bounds)
                if kind == "group":
                    self._parts.whole(req.group)
            self._seed_job(write.body.job)
            self.jobs.admit(write.body)
            with self._lock:
                self.unacked += 1
            if stream:
                self.control.seen(stream, req)
        except Rejected as exc:
            self._refused(exc.code.name, sender, f"request {req.seq} of sidecar "
                          f"{req.sidecar!r}: {exc.message}")
            reply(c4_pb2.IngestAck(seq=req.seq, sidecar=req.sidecar, code=exc.code.value[0],
                                    error=exc.message, parked_job=exc.parked_job))
            return
        seq, sidecar = req.seq, req.sidecar

        def done(dup: bool) -> None:
            with self._lock:
                self.unacked -= 1
            self.ack_seconds.observe(time.perf_counter() - t0)
            reply(c4_pb2.IngestAck(seq=seq, sidecar=sidecar, duplicate=dup))

        self._writer.submit(write, done)

    def _join(self, req: c4_pb2.IngestRequest, stream: int) -> Write | None:
        """A part of a communicator (``GroupInfo.size``): the group's write once this part
        completes it (acknowledged once stored), else None (acknowledge now: parts are kept
        in memory, and sidecars repeat them)."""
        joined = self._parts.add(req.group)
        if stream:
            self.control.seen(stream, req)    # the stream carries the job
        if joined is None:
            return None
        whole, new = joined
        if not new:
            # a part of a group joined before (a sidecar that restarted): the group back to it
            if stream:
                self.control.to_stream(stream, c4_pb2.Control(group=whole))
            return None
        try:
            write = to_write(c4_pb2.IngestRequest(sidecar=req.sidecar, seq=req.seq, group=whole),
                             max_records=self._max_records, bounds=self._bounds)
        except Rejected:
            self._parts.forget(whole)
            raise
        # every node of the job learns the members it did not see
        self.control.to_job(whole.job, whole.attempt, c4_pb2.Control(group=whole))
        return write

    def _refused(self, code: str, sender: str, what: str) -> None:
        """Count a refusal; log it, at most one line per interval per status code."""
        with self._lock:
            self.rejected += 1
            self.rejected_by_code[code] = self.rejected_by_code.get(code, 0) + 1
        self._rated.warning(code, "refused %s (from %s)", what, sender)

    def _seed_job(self, job: str) -> None:
        """A job known from before a restart: count what it registered then (once)."""
        if self._seed is None or not self.jobs.needs_seed(job):
            return
        try:
            ranks, groups = self._seed(job)
        except Exception as exc:  # the store is down: count from what arrives now
            self._rated.warning("seed", "cannot read job %s's registrations from the store to "
                                "count them against its limits: %s", job, exc)
            ranks, groups = [], []
        self.jobs.seed(job, ranks, groups)

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
        if not self.slots.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the daemon already serves {self.slots.limit} ingest streams (its "
                          "--max-streams, one per sidecar): retry later with backoff; put a "
                          "`c4 relay` per rack in front of it, or raise --workers and "
                          "--max-streams")
        try:
            yield from self._stream(request_iterator, context)
        finally:
            self.slots.give()

    def close(self) -> None:
        """The daemon is stopping: each stream ends once every request it took is answered
        (its sidecar resends the rest to the daemon it reaches next)."""
        self._closing.set()

    @property
    def streams(self) -> int:
        """Open ingest streams."""
        return self.slots.used

    def _stream(self, request_iterator: Iterator[c4_pb2.IngestRequest],
                context: grpc.ServicerContext) -> Iterator[c4_pb2.IngestAck]:
        acks: queue.Queue[c4_pb2.IngestAck | None] = queue.Queue()
        sender = self.sender(context)
        state = _StreamState()
        lock = threading.Lock()

        def reply(ack: c4_pb2.IngestAck) -> None:
            with lock:
                state.outstanding -= 1
            acks.put(ack)

        stream = self.control.open(acks.put)
        # job -> the (sidecar, seq) of its first request refused for a job limit on this stream
        parked: dict[str, tuple[str, int]] = {}

        def after(req: c4_pb2.IngestRequest, ack: c4_pb2.IngestAck) -> None:
            """A refusal for a limit: the job's (parked) or the sender's (throttled)."""
            if ack.code == _EXHAUSTED and ack.parked_job:
                parked.setdefault(ack.parked_job, (req.sidecar, req.seq))
            elif ack.code == _EXHAUSTED:
                state.throttled = True
            reply(ack)

        def read() -> None:
            try:
                for n, req in enumerate(request_iterator, 1):
                    if isinstance(req, Undecodable):
                        state.bad = req.message(f"request {n} on this stream")
                        self._refused("INVALID_ARGUMENT", sender, state.bad)
                        break
                    with lock:
                        state.outstanding += 1
                    if state.throttled:
                        # Once one request is refused for the sender's limit, so is everything
                        # after it on this stream: the sidecar resends them in order, and a
                        # job's records never overtake its refused RankInfo.
                        reply(c4_pb2.IngestAck(
                            seq=req.seq, sidecar=req.sidecar, code=_EXHAUSTED,
                            error="an earlier request on this stream was over a limit: "
                                  "retry later with backoff"))
                        continue
                    job = request_job(req)
                    if job is not None and (first := parked.get(job[0])) is not None:
                        if first != (req.sidecar, req.seq):
                            # the same for a parked job's later requests, until the sidecar
                            # resends the first refused one: the job's order holds, the
                            # others flow
                            reply(c4_pb2.IngestAck(
                                seq=req.seq, sidecar=req.sidecar, code=_EXHAUSTED,
                                parked_job=job[0],
                                error=f"an earlier request of job {job[0]!r} on this stream "
                                      "was over a job limit: resend the job's requests later, "
                                      "in order"))
                            continue
                        del parked[job[0]]
                    self._accept(req, functools.partial(after, req), sender, stream)
            except Exception as exc:  # the client went away; stored requests stay stored
                log.debug("ingest stream ended: %s", exc)
            finally:
                self.control.close(stream)
                with lock:
                    state.done = True
                acks.put(None)

        threading.Thread(target=read, name="c4-ingest-reader", daemon=True).start()
        while context.is_active():
            try:
                ack = acks.get(timeout=0.5)
            except queue.Empty:
                ack = None
            if ack is not None:
                yield ack
            with lock:
                finished = (state.done or self._closing.is_set()) and state.outstanding == 0
            if finished and acks.empty():
                if state.bad:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, state.bad)
                return

