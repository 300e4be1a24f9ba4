"""Ranks that speak the collector wire at a real pace: every rank makes the same calls (seq k
of a communicator at the same instant on every member), ships completed rows every 0.1 s as a
collector does and its counters every second; a rank can stop (a hang), its peers then block in
their next call (shipped once, open, as a collector ships a call pending too long)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import Columns, encode_ops
from tests.support.frames import RankConnection, group_info, rank_info

TICK_S = 0.1


class PacedJob:
    """``ranks`` ranks on one node's sidecar socket, all in every communicator of ``pgs``,
    making ``rate`` calls per second on each."""

    def __init__(self, sock: Path, job: str, *, ranks: int, host: str, pgs: tuple[str, ...],
                 rate: float) -> None:
        self.job, self.ranks, self.pgs, self.rate = job, ranks, pgs, rate
        self.conns = [RankConnection(sock) for _ in range(ranks)]
        for r, c in enumerate(self.conns):
            c.send(rank_info(job, r, ranks, host, pid=0),
                   *(group_info(job, pg, list(range(ranks))) for pg in pgs))
        self.t0 = time.time_ns()
        self.sent = [-1] * ranks                    # the last seq each rank shipped
        self.recorded = [0] * ranks
        self.stopped: set[int] = set()              # ranks that stop (the hung ones)
        self.blocked_at: int | None = None          # the call the others wait in
        self._open_sent: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: Exception | None = None

    def start(self) -> PacedJob:
        self._thread.start()
        return self

    def hang(self, rank: int) -> int:
        """``rank`` stops; the others block in the next call. Returns that call's seq."""
        self.stopped.add(rank)
        self.blocked_at = max(self.sent) + 1
        return self.blocked_at

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.conns:
            c.close()

    def _seq_now(self, t_ns: int) -> int:
        return int((t_ns - self.t0) / 1e9 * self.rate)

    def _run(self) -> None:
        last_stats = 0.0
        try:
            while not self._stop.wait(TICK_S):
                now = time.time_ns()
                top = self._seq_now(now)
                for r, conn in enumerate(self.conns):
                    if r in self.stopped:
                        continue
                    if self.blocked_at is not None:
                        if self.sent[r] < self.blocked_at - 1:
                            self._ship(r, conn, range(self.sent[r] + 1, self.blocked_at))
                        if self.sent[r] == self.blocked_at - 1 and r not in self._open_sent:
                            self._open_sent.add(r)
                            self._ship(r, conn, range(self.blocked_at, self.blocked_at + 1),
                                       open_=True)
                        continue
                    if top > self.sent[r]:
                        self._ship(r, conn, range(self.sent[r] + 1, top + 1))
                if time.monotonic() - last_stats >= 1.0:
                    last_stats = time.monotonic()
                    for r, conn in enumerate(self.conns):
                        if r not in self.stopped:
                            conn.send(self._stats(r))
        except Exception as exc:  # surfaced by the test
            self.error = exc

    def _ship(self, rank: int, conn: RankConnection, seqs: range, open_: bool = False) -> None:
        seq = np.asarray(seqs, dtype=np.int64)
        n = len(seq) * len(self.pgs)
        enter = self.t0 + (seq * 1e9 / self.rate).astype(np.int64) + rank * 1000
        cols = Columns({
            "rank": np.full(n, rank, np.int32),
            "pg": np.repeat(np.arange(len(self.pgs), dtype=np.uint32), len(seq)),
            "seq": np.tile(seq, len(self.pgs)),
            "op": np.full(n, len(self.pgs) + 1, np.uint32),
            "nbytes": np.full(n, 4096, np.int64),
            "dtype": np.full(n, len(self.pgs), np.uint32),
            "t_enter_ns": np.tile(enter, len(self.pgs)),
            "t_start_ns": np.full(n, -1, np.int64),
            "t_end_ns": np.full(n, -1, np.int64) if open_ else np.tile(enter + 200_000,
                                                                       len(self.pgs)),
            "status": np.zeros(n, np.uint8),
            "peer": np.full(n, -1, np.int32),
        }, [*self.pgs, "float32", "all_reduce"])
        conn.send(c4_pb2.IngestRequest(ops=encode_ops(self.job, cols)))
        if not open_:
            self.sent[rank] = int(seq[-1])
        self.recorded[rank] += n if not open_ else 0

    def _stats(self, rank: int) -> c4_pb2.IngestRequest:
        return c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(collectors=[
            c4_pb2.CollectorStats(job=self.job, rank=rank, recorded=self.recorded[rank],
                                  shipped=self.recorded[rank], t_ns=time.time_ns())]))
