"""Requests that plant a fault or an attack on a daemon, built by hand (no sidecar needed):
a job hung at a known call, a poison batch, a huge communicator. Shared by the daemon-side
chaos scenarios and the daemon's tests."""

from __future__ import annotations

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import Columns, encode_ops

PERIOD_NS = 20_000_000     # one all_reduce every 20 ms before the hang
INT64_MAX = np.iinfo(np.int64).max


def _ops(rank: int, seqs: range, t0: int, *, open_last: bool = False) -> Columns:
    n = len(seqs)
    seq = np.asarray(seqs, dtype=np.int64)
    enter = t0 + seq * PERIOD_NS + rank * 1000
    end = enter + 1_000_000
    if open_last and n:
        end[-1] = -1
    return Columns({
        "rank": np.full(n, rank, np.int32), "pg": np.zeros(n, np.uint32), "seq": seq,
        "op": np.full(n, 2, np.uint32), "nbytes": np.full(n, 4096, np.int64),
        "dtype": np.ones(n, np.uint32), "t_enter_ns": enter,
        "t_start_ns": np.full(n, -1, np.int64), "t_end_ns": end,
        "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32),
    }, ["0", "float32", "all_reduce"])


def hung_job(job: str, now_ns: int, calls: int = 50) -> list[c4_pb2.IngestRequest]:
    """Two ranks of ``job`` share ``calls`` all_reduces up to ``now_ns``; then rank 0 enters
    one more and rank 1 never does: a hang the live detectors report a few seconds later
    (rank 1 blamed). Without sidecar and seq: set them before sending."""
    t0 = now_ns - calls * PERIOD_NS
    return [
        c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job=job, rank=0, world_size=2, host="n0")),
        c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job=job, rank=1, world_size=2, host="n1")),
        c4_pb2.IngestRequest(group=c4_pb2.GroupInfo(job=job, pg="0", ranks=[0, 1])),
        c4_pb2.IngestRequest(ops=encode_ops(job, _ops(0, range(calls + 1), t0,
                                                      open_last=True))),
        c4_pb2.IngestRequest(ops=encode_ops(job, _ops(1, range(calls), t0))),
    ]


def poison_ops(job: str, rank: int = 0, n: int = 8) -> c4_pb2.IngestRequest:
    """An op batch of ``job`` whose times are int64 extremes (the attack of issue 16)."""
    cols = _ops(rank, range(n), 0)
    cols.columns["t_enter_ns"][:] = INT64_MAX
    cols.columns["t_end_ns"][:] = INT64_MAX
    cols.columns["t_enter_ns"][::2] = -INT64_MAX - 1
    return c4_pb2.IngestRequest(ops=encode_ops(job, cols))


def huge_group(job: str, ranks: int = 1_048_575) -> c4_pb2.IngestRequest:
    """A GroupInfo of ``ranks`` ranks (5 MB on the wire at a million)."""
    return c4_pb2.IngestRequest(group=c4_pb2.GroupInfo(job=job, pg="huge",
                                                       ranks=list(range(ranks))))


def numbered(sidecar: str, first_seq: int, reqs: list[c4_pb2.IngestRequest]
             ) -> list[c4_pb2.IngestRequest]:
    """``reqs`` with their sender and consecutive request numbers set."""
    for i, r in enumerate(reqs):
        r.sidecar, r.seq = sidecar, first_seq + i
    return reqs
