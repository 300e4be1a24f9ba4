"""Turn an ingest request into a store write, or reject it with a gRPC status that says why.

Only what the request itself shows is checked here (its shape, and ``bounds``); what depends on
the jobs the daemon knows (registered, live, their size and memory) is ``jobs.JobBook``'s."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import (
    BatchError,
    Columns,
    decode_conns,
    decode_linkstats,
    decode_ops,
    decode_ports,
    decode_progress,
)
from diagnosis.daemon.bounds import Bounds, check_batch, check_ranks
from diagnosis.daemon.errors import Rejected
from diagnosis.store import (
    BatchRows,
    ConnRows,
    DetailRows,
    GroupRecord,
    OpRows,
    RankRecord,
    Write,
)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, message)


__all__ = ["Rejected", "to_write"]


def to_write(req: c4_pb2.IngestRequest, *, max_records: int, bounds: Bounds | None = None,
             now_ns: int | None = None) -> Write:
    """Validate ``req`` against ``bounds`` (times against ``now_ns``, the daemon's clock) and
    convert it."""
    bounds = bounds or Bounds()
    now_ns = time.time_ns() if now_ns is None else now_ns
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
        _need(r.world_size <= bounds.max_ranks,
              f"RankInfo.world_size {r.world_size:,} exceeds the {bounds.max_ranks:,} ranks "
              "this daemon takes per job (its --max-ranks)")
        # when the rank started: any time in the past (a job may run for months), not ahead
        _need(0 <= r.t_ns <= bounds.time_range(now_ns)[1],
              f"RankInfo.t_ns {r.t_ns} is negative or ahead of the daemon's clock ({now_ns} "
              "ns): check the node's clock (NTP), or leave it 0")
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
        _need(len(g.ranks) <= bounds.max_ranks,
              f"GroupInfo {g.pg!r} lists {len(g.ranks):,} ranks; this daemon takes jobs of at "
              f"most {bounds.max_ranks:,} (its --max-ranks)")
        ranks = np.asarray(g.ranks, dtype=np.int64)
        check_ranks(ranks, f"GroupInfo {g.pg!r}", bounds)
        _need(len(np.unique(ranks)) == len(ranks), f"GroupInfo {g.pg!r} repeats a rank")
        return Write(req.sidecar, req.seq,
                     GroupRecord(g.job, g.attempt, g.pg, tuple(g.ranks), g.desc))
    if kind == "ops":
        ops = req.ops
        cols = _columns(ops, "OpBatch", decode_ops, ("rank", "peer"), max_records, bounds,
                        now_ns)
        return Write(req.sidecar, req.seq, OpRows(ops.job, ops.attempt, cols))
    if kind == "conns":
        conns = req.conns
        cols = _columns(conns, "ConnSampleBatch", decode_conns, ("rank",), max_records, bounds,
                        now_ns)
        return Write(req.sidecar, req.seq, ConnRows(conns.job, conns.attempt, cols))
    if kind in _BATCHES:
        return _batch(req, kind, max_records, bounds, now_ns)
    if kind == "detail":
        return _detail(req, max_records, bounds, now_ns)
    if kind == "health":
        return _health(req, max_records, bounds, now_ns)
    raise Rejected(grpc.StatusCode.INVALID_ARGUMENT,
                   "IngestRequest has no body: set one of rank, group, ops, conns, progress, "
                   "linkstats, ports, detail, health, stats")


# request body -> (message name, stored kind, decoder, rank columns, time column)
_BATCHES: dict[str, tuple[str, str, Callable[[Any], Columns], tuple[str, ...], str]] = {
    "progress": ("ProgressBatch", "progress", decode_progress, ("rank", "peer"), "t_ns"),
    "linkstats": ("LinkStatBatch", "linkstat", decode_linkstats, ("src", "dst"), "t_ns"),
    "ports": ("PortBatch", "port", decode_ports, (), "t_ns"),
}


def _columns(b: Any, name: str, decode: Callable[[Any], Columns], rank_columns: tuple[str, ...],
             max_records: int, bounds: Bounds, now_ns: int) -> Columns:
    """The columns of the batch message ``b`` (a ``name``), checked against the bounds."""
    _need(bool(b.job), f"{name}.job is empty")
    _need(b.count <= max_records,
          f"{name} holds {b.count} records; the limit is {max_records}: send smaller batches")
    try:
        cols = decode(b)
    except BatchError as exc:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
    check_batch(cols, name, bounds, now_ns, rank_columns)
    return cols


def _batch(req: c4_pb2.IngestRequest, kind: str, max_records: int, bounds: Bounds,
           now_ns: int) -> Write:
    name, stored, decode, rank_columns, time_column = _BATCHES[kind]
    b = getattr(req, kind)
    cols = _columns(b, name, decode, rank_columns, max_records, bounds, now_ns)
    t = cols[time_column]
    lo, hi = (int(t.min()), int(t.max())) if len(t) else (0, 0)
    return Write(req.sidecar, req.seq, BatchRows(
        b.job, b.attempt, stored, len(cols), lo, hi, b.SerializeToString(), cols,
        completed_only=kind == "progress" and b.completed_only))


def _detail(req: c4_pb2.IngestRequest, max_records: int, bounds: Bounds, now_ns: int) -> Write:
    d = req.detail
    _need(bool(d.job), "DetailBatch.job is empty")
    _need(bool(d.fault_id), "DetailBatch.fault_id is empty: answer a DetailRequest")
    _need(d.ops.count <= max_records,
          f"DetailBatch holds {d.ops.count} records; the limit is {max_records}")
    cols = None
    if d.ops.count:
        try:
            cols = decode_ops(d.ops)
        except BatchError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"DetailBatch.ops: {exc}") from exc
        check_batch(cols, "OpBatch", bounds, now_ns, ("rank", "peer"))
    return Write(req.sidecar, req.seq, DetailRows(d.job, d.attempt, d.fault_id, d.host,
                                                  d.ops.count, d.SerializeToString(), cols))


def _health(req: c4_pb2.IngestRequest, max_records: int, bounds: Bounds, now_ns: int) -> Write:
    """Health samples and events, stored as the batch they came in (few rows per node)."""
    h = req.health
    _need(bool(h.job), "HealthBatch.job is empty")
    _need(0 < len(h.samples) <= max_records,
          f"HealthBatch holds {len(h.samples)} samples; send 1 to {max_records}")
    lo, hi = bounds.time_range(now_ns)
    for i, s in enumerate(h.samples):
        _need(bool(s.host), f"HealthBatch sample {i} names no host")
        _need(bool(s.event) or len(s.values) > 0 or len(s.reasons) > 0,
              f"HealthBatch sample {i} carries no values, reasons or event")
        _need(lo <= s.t_ns <= hi,
              f"HealthBatch sample {i} is stamped {s.t_ns} ns, outside the times this daemon "
              f"takes ({bounds.max_age_s / 3600:,.0f} h behind its clock to "
              f"{bounds.max_ahead_s / 3600:,.1f} h ahead): check the node's clock (NTP), or "
              "the daemon's --max-record-age / --max-clock-ahead")
    times = [s.t_ns for s in h.samples]
    return Write(req.sidecar, req.seq, BatchRows(h.job, h.attempt, "health", len(h.samples),
                                                 min(times), max(times), h.SerializeToString()))
