"""Turn an ingest request into a store write, or reject it with a gRPC status that says why."""

from __future__ import annotations

import grpc

from diagnosis.store import (
    BatchRows,
    ConnRows,
    DetailRows,
    GroupRecord,
    OpRows,
    RankRecord,
    Write,
)
from proto import c4_pb2
from proto.codec import (
    BatchError,
    Columns,
    decode_conns,
    decode_linkstats,
    decode_ops,
    decode_ports,
    decode_progress,
)


class Rejected(Exception):
    """A request that will never be stored; resending it will not help."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Rank ids index per-rank arrays in the live detectors: an absurd id from a broken or hostile
# sender must be refused here, not turned into a multi-gigabyte allocation.
MAX_RANKS = 1 << 20


def _ranks_ok(values: object, what: str) -> None:
    import numpy as np

    arr = np.asarray(values)
    if len(arr) and int(arr.max()) >= MAX_RANKS:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                       f"{what} holds rank {int(arr.max())}; c4 takes ranks below {MAX_RANKS}")


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, message)


def to_write(req: c4_pb2.IngestRequest, known_jobs: set[str], *,
             max_records: int) -> Write:
    """Validate ``req`` and convert it. ``known_jobs`` are jobs with a registered rank."""
    _need(bool(req.sidecar), "IngestRequest.sidecar is empty: name the sending sidecar")
    _need(req.seq > 0, "IngestRequest.seq must be a positive per-sidecar request number")
    kind = req.WhichOneof("body")
    if kind == "rank":
        r = req.rank
        _need(bool(r.job), "RankInfo.job is empty")
        _need(r.rank >= 0, f"RankInfo.rank is {r.rank}; ranks are >= 0")
        _need(r.world_size > r.rank,
              f"RankInfo.world_size {r.world_size} must exceed rank {r.rank}")
        _need(bool(r.host), "RankInfo.host is empty")
        _need(r.world_size <= MAX_RANKS,
              f"RankInfo.world_size {r.world_size} exceeds the {MAX_RANKS} ranks c4 takes")
        return Write(req.sidecar, req.seq, RankRecord(
            job=r.job, attempt=r.attempt, rank=r.rank, world_size=r.world_size, host=r.host,
            local_rank=r.local_rank, pid=r.pid, gpu=r.gpu, nic=r.nic, backend=r.backend,
            t_ns=r.t_ns, cuda_device=r.cuda_device))
    if kind == "group":
        g = req.group
        _need(bool(g.job), "GroupInfo.job is empty")
        _need(bool(g.pg), "GroupInfo.pg is empty")
        _need(len(g.ranks) > 0, f"GroupInfo {g.pg!r} has no ranks")
        _need(min(g.ranks) >= 0, f"GroupInfo {g.pg!r} lists a negative rank")
        _need(len(set(g.ranks)) == len(g.ranks), f"GroupInfo {g.pg!r} repeats a rank")
        _ranks_ok(list(g.ranks), f"GroupInfo {g.pg!r}")
        _known(g.job, known_jobs)
        return Write(req.sidecar, req.seq,
                     GroupRecord(g.job, g.attempt, g.pg, tuple(g.ranks), g.desc))
    if kind == "ops":
        b = req.ops
        _need(bool(b.job), "OpBatch.job is empty")
        _need(b.count <= max_records,
              f"OpBatch holds {b.count} records; the limit is {max_records}: send smaller batches")
        _known(b.job, known_jobs)
        try:
            cols = decode_ops(b)
        except BatchError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        _ranks_ok(cols["rank"], "OpBatch column 'rank'")
        _ranks_ok(cols["peer"], "OpBatch column 'peer'")
        return Write(req.sidecar, req.seq, OpRows(b.job, b.attempt, cols))
    if kind == "conns":
        b = req.conns
        _need(bool(b.job), "ConnSampleBatch.job is empty")
        _need(b.count <= max_records,
              f"ConnSampleBatch holds {b.count} records; the limit is {max_records}")
        _known(b.job, known_jobs)
        try:
            cols = decode_conns(b)
        except BatchError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        _ranks_ok(cols["rank"], "ConnSampleBatch column 'rank'")
        return Write(req.sidecar, req.seq, ConnRows(b.job, b.attempt, cols))
    if kind in _BATCHES:
        return _batch(req, kind, known_jobs, max_records)
    if kind == "detail":
        return _detail(req, known_jobs, max_records)
    raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                   "IngestRequest has no body: set one of rank, group, ops, conns, progress, "
                   "linkstats, ports, detail, stats")


# request body -> (message name, stored kind, decoder, rank columns, time column)
_BATCHES = {
    "progress": ("ProgressBatch", "progress", decode_progress, ("rank", "peer"), "t_ns"),
    "linkstats": ("LinkStatBatch", "linkstat", decode_linkstats, ("src", "dst"), "t_ns"),
    "ports": ("PortBatch", "port", decode_ports, (), "t_ns"),
}


def _batch(req: c4_pb2.IngestRequest, kind: str, known_jobs: set[str],
           max_records: int) -> Write:
    name, stored, decode, rank_columns, time_column = _BATCHES[kind]
    b = getattr(req, kind)
    _need(bool(b.job), f"{name}.job is empty")
    _need(b.count <= max_records,
          f"{name} holds {b.count} records; the limit is {max_records}: send smaller batches")
    _known(b.job, known_jobs)
    try:
        cols: Columns = decode(b)
    except BatchError as exc:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
    for col in rank_columns:
        _ranks_ok(cols[col], f"{name} column {col!r}")
    t = cols[time_column]
    lo, hi = (int(t.min()), int(t.max())) if len(t) else (0, 0)
    return Write(req.sidecar, req.seq, BatchRows(b.job, b.attempt, stored, len(cols), lo, hi,
                                                 b.SerializeToString(), cols))


def _detail(req: c4_pb2.IngestRequest, known_jobs: set[str], max_records: int) -> Write:
    d = req.detail
    _need(bool(d.job), "DetailBatch.job is empty")
    _need(bool(d.fault_id), "DetailBatch.fault_id is empty: answer a DetailRequest")
    _need(d.ops.count <= max_records,
          f"DetailBatch holds {d.ops.count} records; the limit is {max_records}")
    _known(d.job, known_jobs)
    cols = None
    if d.ops.count:
        try:
            cols = decode_ops(d.ops)
        except BatchError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"DetailBatch.ops: {exc}") from exc
        _ranks_ok(cols["rank"], "DetailBatch column 'rank'")
    return Write(req.sidecar, req.seq, DetailRows(d.job, d.attempt, d.fault_id, d.host,
                                                  d.ops.count, d.SerializeToString(), cols))


def _known(job: str, known_jobs: set[str]) -> None:
    if job not in known_jobs:
        raise Rejected(grpc.StatusCode.NOT_FOUND,
                       f"job {job!r} is unknown: send its RankInfo before its records")
