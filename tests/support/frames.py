"""Build collector frames by hand: a test driver that speaks the real collector wire."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import Columns, encode_ops
from collectors.wire import encode_frame

# Records must carry times near the daemon's clock (it refuses others): this run's second.
T0 = time.time_ns() // 1_000_000_000 * 1_000_000_000


def rank_info(job: str, rank: int, world: int, host: str, pid: int = 0) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job=job, rank=rank, world_size=world, host=host, pid=pid, backend="gloo"))


def group_info(job: str, pg: str, ranks: list[int]) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(group=c4_pb2.GroupInfo(job=job, pg=pg, ranks=ranks))


def op_batch(job: str, rank: int, seqs: range, *, pg: str = "0", t0: int = T0,
             t_end: bool = True) -> c4_pb2.IngestRequest:
    n = len(seqs)
    seq = np.asarray(seqs, dtype=np.int64)
    enter = t0 + seq * 1_000_000 + rank * 1000
    # string table: 0 = the group, 1 = the dtype, 2 = the op
    cols = Columns({
        "rank": np.full(n, rank, np.int32), "pg": np.zeros(n, np.uint32), "seq": seq,
        "op": np.full(n, 2, np.uint32), "nbytes": np.full(n, 4096, np.int64),
        "dtype": np.ones(n, np.uint32), "t_enter_ns": enter,
        "t_start_ns": np.full(n, -1, np.int64),
        "t_end_ns": enter + 500_000 if t_end else np.full(n, -1, np.int64),
        "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32),
    }, [pg, "float32", "all_reduce"])
    return c4_pb2.IngestRequest(ops=encode_ops(job, cols))


class RankConnection:
    """One rank's connection to its sidecar's Unix socket."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))

    def send(self, *requests: c4_pb2.IngestRequest) -> None:
        self.sock.sendall(b"".join(encode_frame(r) for r in requests))

    def close(self) -> None:
        self.sock.close()
