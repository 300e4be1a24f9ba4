"""What the write-ahead log costs per record, on one thread, without the noise of a busy
machine: the sidecar's own path for op frames (decode and check a collector frame, log it,
batch, cut, and release once "acknowledged") run in a loop over frames like the collectors
send, with the log on a directory and with no log (``Spill(None)``), in alternating blocks.
CPU time is the thread's (user and system: the log's writes included)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from c4.proto import c4_pb2
from c4.proto.codec import encode_ops
from collectors.buffer import build_columns
from collectors.sidecar.batcher import Batcher
from collectors.sidecar.counters import Drops
from collectors.sidecar.intake import Intake, Peer
from collectors.sidecar.owners import Owners
from collectors.sidecar.spill import FrameRef, Spill


def collector_frames(ranks: int, frames_per_rank: int, rows: int) -> list[bytes]:
    """Op frames as the collector's shipper builds them (its row tuples, its columns)."""
    out = []
    t = time.time_ns()
    for f in range(frames_per_rank):
        for rank in range(ranks):
            tuples = [(0, f * rows + i, 1, 1 << 20, 2, t + i * 25_000, -1, t + i * 25_000 + 800_000,
                       0, -1) for i in range(rows)]
            cols = build_columns(tuples, rank, ["0", "all_reduce", "float32"])
            out.append(c4_pb2.IngestRequest(ops=encode_ops("cost", cols), sidecar=f"c-{rank}",
                                            seq=f + 1).SerializeToString())
    return out


class _AckAtOnce:
    """The outbox's part, reduced to what touches the log: cut the batch, then release it
    as a prompt daemon would."""

    def __init__(self, spill: Spill) -> None:
        self.spill = spill
        self.connected = True
        self.seq = 0

    def put_frames(self, frames: list[FrameRef], req: c4_pb2.IngestRequest | None) -> None:
        del req
        self.seq += 1
        self.spill.release(self.spill.append_cut("cost", self.seq, frames))

    def put(self, **body: object) -> None:
        del body


@dataclass
class PathCost:
    wal: bool
    records: int
    cpu_s: float

    @property
    def per_million(self) -> float:
        return self.cpu_s / self.records * 1e6


def path_cost(frames: list[bytes], wal: bool, workdir: Path) -> PathCost:
    spill = Spill(workdir / "log" if wal else None, 1 << 40)
    outbox = _AckAtOnce(spill)
    batcher = Batcher(outbox.put_frames, batch_records=16384, flush_interval_s=3600)
    intake = Intake(spill=spill, outbox=outbox, batcher=batcher,  # type: ignore[arg-type]
                    owners=Owners(None), drops=Drops())
    peer = Peer(uid=0, pid=1, gid=0)
    t0 = time.thread_time()
    for raw in frames:
        intake.take(peer, raw)
    batcher.flush_due(force=True)
    cpu = time.thread_time() - t0
    spill.close()
    return PathCost(wal, intake.received, cpu)


def measure(blocks: int = 6, frames_per_block: int = 200, rows: int = 500) -> list[PathCost]:
    frames = collector_frames(8, frames_per_block // 8, rows)
    out = []
    with tempfile.TemporaryDirectory(prefix="c4-walcost-") as d:
        for i in range(blocks):
            for wal in (True, False) if i % 2 == 0 else (False, True):
                out.append(path_cost(frames, wal, Path(d) / f"{i}-{wal}"))
    return out
