"""The Faults and Query services: what the CLI and the recovery controller ask the daemon."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator

import grpc
import numpy as np

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.proto.codec import Columns, encode_conns, encode_ops
from c4.report import FaultReport
from c4.report_proto import to_proto
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.slots import Slots
from diagnosis.store import JobRecord, Store

OPS_CHUNK = 65536


class FaultsService(c4_pb2_grpc.FaultsServicer):
    def __init__(self, store: Store, hub: FaultHub, *, max_watches: int = 64) -> None:
        self._store = store
        self._hub = hub
        self.watches = Slots(max_watches)

    def List(self, request: c4_pb2.ListFaultsRequest, context: grpc.ServicerContext
             ) -> c4_pb2.ListFaultsResponse:
        reports = self._store.list_faults(request.job or None, open_only=request.open_only,
                                          limit=request.limit)
        return c4_pb2.ListFaultsResponse(reports=[to_proto(r) for r in reports])

    def Get(self, request: c4_pb2.GetFaultRequest, context: grpc.ServicerContext
            ) -> c4_pb2.FaultReport:
        return _found(self._store.get_fault(request.id), request.id, context)

    def Watch(self, request: c4_pb2.WatchFaultsRequest, context: grpc.ServicerContext
              ) -> Iterator[c4_pb2.FaultReport]:
        """Each watch holds an RPC thread while it lasts: at most ``max_watches`` at once."""
        if not self.watches.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the daemon already serves {self.watches.limit} fault watches (its "
                          "--max-watches): stop one, or retry later; ingest and queries keep "
                          "their own threads")
        try:
            yield from self._watch(request, context)
        finally:
            self.watches.give()

    def _watch(self, request: c4_pb2.WatchFaultsRequest, context: grpc.ServicerContext
               ) -> Iterator[c4_pb2.FaultReport]:
        q = self._hub.subscribe()
        context.add_callback(lambda: q.put(None))
        try:
            if request.include_open:
                for r in reversed(self._store.list_faults(request.job or None, open_only=True)):
                    yield to_proto(r)
            while context.is_active():
                try:
                    report = q.get(timeout=1.0)
                except queue.Empty:
                    continue
                if report is None:
                    return
                if not request.job or report.job == request.job:
                    yield to_proto(report)
        finally:
            self._hub.unsubscribe(q)


class FaultActionsService(c4_pb2_grpc.FaultActionsServicer):
    """What a person on call does to a report: acknowledge it, close it."""

    def __init__(self, hub: FaultHub) -> None:
        self._hub = hub

    def Ack(self, request: c4_pb2.FaultActionRequest, context: grpc.ServicerContext
            ) -> c4_pb2.FaultReport:
        return _found(self._hub.acknowledge(request.id, request.by or "someone",
                                                 request.note), request.id, context)

    def Close(self, request: c4_pb2.FaultActionRequest, context: grpc.ServicerContext
              ) -> c4_pb2.FaultReport:
        reason = f"closed by {request.by or 'someone'}" + \
            (f": {request.note}" if request.note else "")
        return _found(self._hub.resolve(request.id, reason, by=request.by or "someone"),
                           request.id, context)


class QueryService(c4_pb2_grpc.QueryServicer):
    def __init__(self, store: Store, status: Callable[[], c4_pb2.StatusResponse],
                 job_state: Callable[[str], tuple[str, int, str]] | None = None) -> None:
        self._store = store
        self._status = status
        self._job_state = job_state or (lambda job: ("unknown", 0, ""))

    def Jobs(self, request: c4_pb2.ListJobsRequest, context: grpc.ServicerContext
             ) -> c4_pb2.ListJobsResponse:
        open_by_job: dict[str, int] = {}
        for r in self._store.list_faults(open_only=True):
            open_by_job[r.job] = open_by_job.get(r.job, 0) + 1
        return c4_pb2.ListJobsResponse(jobs=[self._summary(j, open_by_job.get(j.job, 0))
                                             for j in self._store.jobs()])

    def _summary(self, j: JobRecord, open_faults: int) -> c4_pb2.JobSummary:
        state, ended_ns, end_reason = self._job_state(j.job)
        return c4_pb2.JobSummary(job=j.job, attempt=j.attempt, world_size=j.world_size,
                                 ranks_seen=j.ranks_seen, hosts=list(j.hosts), ops=j.ops,
                                 first_ns=j.first_ns, last_ns=j.last_ns,
                                 open_faults=open_faults, state=state, ended_ns=ended_ns,
                                 end_reason=end_reason)

    def Ops(self, request: c4_pb2.OpsRequest, context: grpc.ServicerContext
            ) -> Iterator[c4_pb2.OpBatch]:
        if not any(j.job == request.job for j in self._store.jobs()):
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"job {request.job!r} is unknown: `c4 jobs` lists the jobs")
        cols = self._store.ops(request.job, rank=None if request.rank < 0 else request.rank,
                               pg=request.pg or None, limit=request.limit)
        for start in range(0, max(len(cols), 1), OPS_CHUNK):
            part = Columns({k: np.ascontiguousarray(v[start:start + OPS_CHUNK])
                            for k, v in cols.columns.items()}, cols.strings,
                           {i - start: t for i, t in cols.error_text.items()
                            if start <= i < start + OPS_CHUNK})
            yield encode_ops(request.job, part)

    def Groups(self, request: c4_pb2.GroupsRequest, context: grpc.ServicerContext
               ) -> Iterator[c4_pb2.GroupSummary]:
        for g in self._store.groups(request.job):
            yield c4_pb2.GroupSummary(pg=g.pg, ranks=list(g.ranks), desc=g.desc)

    def Ranks(self, request: c4_pb2.GroupsRequest, context: grpc.ServicerContext
              ) -> Iterator[c4_pb2.RankInfo]:
        for r in self._store.ranks(request.job):
            yield c4_pb2.RankInfo(job=r.job, attempt=r.attempt, rank=r.rank,
                                  world_size=r.world_size, host=r.host, local_rank=r.local_rank,
                                  pid=r.pid, gpu=r.gpu, nic=r.nic, backend=r.backend, t_ns=r.t_ns,
                                  cuda_device=r.cuda_device)

    def Status(self, request: c4_pb2.StatusRequest, context: grpc.ServicerContext
               ) -> c4_pb2.StatusResponse:
        return self._status()

    def Reduced(self, request: c4_pb2.ReducedRequest, context: grpc.ServicerContext
                ) -> Iterator[c4_pb2.ReducedChunk]:
        for b in self._store.batches(request.job):
            yield _CHUNKS[b.kind](b.payload)
        # what full telemetry ships instead of linkstat: the retransmissions in them are the
        # only evidence of a lossy link, so an export must not leave them out
        conns = self._store.conns(request.job)
        for start in range(0, len(conns), OPS_CHUNK):
            part = Columns({k: np.ascontiguousarray(v[start:start + OPS_CHUNK])
                            for k, v in conns.columns.items()}, conns.strings)
            yield c4_pb2.ReducedChunk(conns=encode_conns(request.job, part))

    def Details(self, request: c4_pb2.DetailsRequest, context: grpc.ServicerContext
                ) -> Iterator[c4_pb2.DetailBatch]:
        for d in self._store.details(request.job, request.fault_id or None):
            yield c4_pb2.DetailBatch.FromString(d.payload)


# stored batch kind -> its payload as a ReducedChunk
_CHUNKS: dict[str, Callable[[bytes], c4_pb2.ReducedChunk]] = {
    "progress": lambda p: c4_pb2.ReducedChunk(progress=c4_pb2.ProgressBatch.FromString(p)),
    "linkstat": lambda p: c4_pb2.ReducedChunk(linkstats=c4_pb2.LinkStatBatch.FromString(p)),
    "port": lambda p: c4_pb2.ReducedChunk(ports=c4_pb2.PortBatch.FromString(p)),
    "schedule": lambda p: c4_pb2.ReducedChunk(schedule=c4_pb2.SampleSchedule.FromString(p)),
    "health": lambda p: c4_pb2.ReducedChunk(health=c4_pb2.HealthBatch.FromString(p)),
}


def _found(report: FaultReport | None, fault_id: str,
           context: grpc.ServicerContext) -> c4_pb2.FaultReport:
    """The report as a message; without one the call ends NOT_FOUND (``abort`` raises)."""
    if report is None:
        context.abort(grpc.StatusCode.NOT_FOUND,
                      f"no fault {fault_id!r}: `c4 faults list` shows the ids")
        # grpc is untyped here, so the type checker does not know that abort never returns
        raise AssertionError("ServicerContext.abort returned")
    return to_proto(report)
