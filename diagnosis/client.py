"""A typed client for the daemon, used by the CLI, the recovery controller and tests.

Every gRPC failure surfaces as ``DaemonError`` (or ``DaemonUnavailable``) with a message that
says what to do, never as a raw ``grpc.RpcError``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.proto.codec import OP_COLUMNS, Columns, concat, decode_ops, empty_columns
from c4.report import FaultReport
from c4.report_proto import from_proto
from c4.security.channel import ClientSecurity, default_security, open_channel
from diagnosis.daemon.config import MAX_MESSAGE_BYTES, daemon_address
from diagnosis.errors import DiagnosisError


class DaemonError(DiagnosisError):
    """The daemon answered with an error."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class DaemonUnavailable(DaemonError):
    """No daemon answers at the address."""


def _wrap(exc: grpc.RpcError, address: str) -> DaemonError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return DaemonError(
            f"the daemon at {address} did not accept the token: {details}. Give a token from "
            "the daemon's token file with C4_TOKEN or --token-file", code)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return DaemonError(
            f"the daemon at {address} refused: {details}. Use a token with that role "
            "(C4_TOKEN / --token-file)", code)
    if code == grpc.StatusCode.UNAVAILABLE and any(
            w in details.lower() for w in ("ssl", "tls", "handshake", "certificate")):
        return DaemonUnavailable(
            f"no TLS connection to the daemon at {address} ({details}): check --tls-ca / "
            "C4_TLS_CA (the CA that signed the daemon's certificate) and, for mutual TLS, "
            "--tls-cert and --tls-key (C4_TLS_CERT, C4_TLS_KEY)", code)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return DaemonUnavailable(
            f"no c4 daemon answers at {address}: start one with `c4 daemon`, or point "
            f"--daemon / C4_DAEMON at the right address ({details})", code)
    return DaemonError(f"the daemon at {address} says: {details}", code)


class DaemonClient:
    def __init__(self, address: str | None = None, *, timeout: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        """``security``: TLS files and token; by default from ``C4_TLS_*`` and ``C4_TOKEN``."""
        self.address = address or daemon_address()
        self.timeout = timeout
        try:
            self.security = security if security is not None else default_security()
            # an answer as large as the daemon sends: the status of a 131,072-rank job (its
            # sidecars' counters of every rank) is past gRPC's default 4 MiB
            self._channel = open_channel(
                self.address, self.security,
                [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
        except ValueError as exc:
            raise DaemonError(f"cannot set up the connection to {self.address}: {exc}") from None
        self._faults = c4_pb2_grpc.FaultsStub(self._channel)
        self._actions = c4_pb2_grpc.FaultActionsStub(self._channel)
        self._query = c4_pb2_grpc.QueryStub(self._channel)
        self._ingest = c4_pb2_grpc.IngestStub(self._channel)
        self._admin = c4_pb2_grpc.AdminStub(self._channel)
        self._topology = c4_pb2_grpc.TopologyStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, fn: Any, request: Any) -> Any:
        try:
            return fn(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None

    def faults(self, job: str = "", *, open_only: bool = False, limit: int = 0
               ) -> list[FaultReport]:
        resp = self._call(self._faults.List, c4_pb2.ListFaultsRequest(
            job=job, open_only=open_only, limit=limit))
        return [from_proto(r) for r in resp.reports]

    def fault(self, fault_id: str) -> FaultReport:
        return from_proto(self._call(self._faults.Get, c4_pb2.GetFaultRequest(id=fault_id)))

    def ack(self, fault_id: str, by: str, note: str = "") -> FaultReport:
        """Mark a fault as taken (it stays open); needs the ``act`` role."""
        return from_proto(self._call(self._actions.Ack, c4_pb2.FaultActionRequest(
            id=fault_id, by=by, note=note)))

    def close_fault(self, fault_id: str, by: str, note: str = "") -> FaultReport:
        """Resolve a fault with a person's reason; needs the ``act`` role."""
        return from_proto(self._call(self._actions.Close, c4_pb2.FaultActionRequest(
            id=fault_id, by=by, note=note)))

    def watch(self, job: str = "", *, include_open: bool = False) -> Iterator[FaultReport]:
        """Fault reports as the daemon files or updates them; ends when the daemon stops."""
        try:
            for msg in self._faults.Watch(c4_pb2.WatchFaultsRequest(
                    job=job, include_open=include_open)):
                yield from_proto(msg)
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None

    def jobs(self) -> list[c4_pb2.JobSummary]:
        return list(self._call(self._query.Jobs, c4_pb2.ListJobsRequest()).jobs)

    def status(self) -> c4_pb2.StatusResponse:
        return self._call(self._query.Status, c4_pb2.StatusRequest())

    def remove_job(self, job: str) -> c4_pb2.RemoveJobResponse:
        """Remove every attempt of ``job`` and its fault reports (needs the admin role)."""
        return self._call(self._admin.RemoveJob, c4_pb2.RemoveJobRequest(job=job))

    def groups(self, job: str) -> list[c4_pb2.GroupSummary]:
        try:
            return list(self._query.Groups(c4_pb2.GroupsRequest(job=job), timeout=self.timeout))
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None

    def ranks(self, job: str) -> list[c4_pb2.RankInfo]:
        """Where each rank of the job's latest attempt runs."""
        try:
            return list(self._query.Ranks(c4_pb2.GroupsRequest(job=job), timeout=self.timeout))
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None

    def ops(self, job: str, *, rank: int = -1, pg: str = "", limit: int = 0) -> Columns:
        """Every stored call of a job, one row per call, as columns with string names."""
        try:
            parts = [decode_ops(b) for b in self._query.Ops(
                c4_pb2.OpsRequest(job=job, rank=rank, pg=pg, limit=limit),
                timeout=max(self.timeout, 60.0))]
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None
        return concat(parts) if parts else empty_columns(OP_COLUMNS)

    def reduced(self, job: str) -> list[c4_pb2.ReducedChunk]:
        """The reduced records (progress, linkstat, port) and sampling schedules stored for a
        job, in the order stored."""
        try:
            return list(self._query.Reduced(c4_pb2.ReducedRequest(job=job),
                                            timeout=max(self.timeout, 60.0)))
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None

    def details(self, job: str, fault_id: str = "") -> list[c4_pb2.DetailBatch]:
        """The full records the nodes sent around the job's fault reports (one fault's with
        ``fault_id``)."""
        try:
            return list(self._query.Details(c4_pb2.DetailsRequest(job=job, fault_id=fault_id),
                                            timeout=max(self.timeout, 60.0)))
        except grpc.RpcError as exc:
            raise _wrap(exc, self.address) from None

    def job_topology(self, job: str, *, with_graph: bool = False) -> dict[str, Any]:
        """A job's topology as the daemon assembled it from its hosts' discovery and its
        fabric file (``c4.topology.job.JobTopology.to_json``)."""
        import json

        resp = self._call(self._topology.Job,
                          c4_pb2.JobTopologyRequest(job=job, with_graph=with_graph))
        return json.loads(resp.json)

    def send(self, request: c4_pb2.IngestRequest) -> c4_pb2.IngestAck:
        return self._call(self._ingest.Send, request)

