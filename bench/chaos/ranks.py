"""Simulated ranks that ship through the real collector code (``collectors.shipper``): rows go
into each rank's ``RecordBuffer`` at a paced rate and the real shipper threads send them to the
sidecar, keep them until acknowledged and send them again after a reconnection. Run in its own
process (``spawn``), so that its CPU is not the sidecar's.

"Sent" is every row a rank recorded; the collectors' own drops (buffer full) are counted by the
shippers and reported with it."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoadPlan:
    socket: str
    job: str
    ranks: int
    rate: float          # records per second over all ranks
    duration_s: float
    drain_s: float = 120.0  # after the last row: how long to wait for every acknowledgement
    host: str = "node0"


@dataclass
class LoadResult:
    sent: list[int]       # rows recorded, per rank
    dropped: list[int]    # rows the collectors dropped and counted, per rank
    unacked: list[int]    # frames still unacknowledged when the driver gave up waiting
    resent: list[int]     # frames sent again after a reconnection
    seconds: float        # the sending window


def _drive(plan: LoadPlan, out: str, ready: mp.synchronize.Event,
           go: mp.synchronize.Event) -> None:
    from c4.proto import c4_pb2
    from collectors.buffer import RecordBuffer
    from collectors.config import CollectorConfig
    from collectors.shipper import Shipper

    shippers = []
    for rank in range(plan.ranks):
        config = CollectorConfig(socket_path=Path(plan.socket), job=plan.job, attempt=0,
                                 host=plan.host, flush_interval_s=0.1, reconnect_max_s=0.5,
                                 buffer_rows=65536, exit_flush_s=5.0, term_flush_s=0.0)
        buffer = RecordBuffer(config.buffer_rows)
        buffer.groups.append(c4_pb2.GroupInfo(pg="0", ranks=list(range(plan.ranks))))
        info = c4_pb2.RankInfo(job=plan.job, rank=rank, world_size=plan.ranks, host=plan.host,
                               pid=os.getpid(), backend="gloo")
        shippers.append(Shipper(config, buffer, info))
    for s in shippers:  # every rank's string table gets the same three ids
        pg, op, dtype = (s.buffer.strings.intern(x) for x in ("0", "all_reduce", "float32"))
        s.start()
    ready.set()
    go.wait()
    tick = 0.01
    per_tick = plan.rate * tick / plan.ranks
    seqs = [0] * plan.ranks
    owed = 0.0
    t0 = time.monotonic()
    while (now := time.monotonic()) - t0 < plan.duration_s:
        owed += per_tick
        n = int(owed)
        owed -= n
        t = time.time_ns()
        for rank, s in enumerate(shippers):
            for i in range(seqs[rank], seqs[rank] + n):
                s.buffer.append((pg, i, op, 1 << 20, dtype, t, -1, t + 800_000, 0, -1))
            seqs[rank] += n
        delay = t0 + (int((now - t0) / tick) + 1) * tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    seconds = time.monotonic() - t0
    deadline = time.monotonic() + plan.drain_s
    while time.monotonic() < deadline and any(
            s.buffer.rows or s.unacknowledged() for s in shippers):
        for s in shippers:
            s.flush(0.5)
        time.sleep(0.1)
    result = LoadResult(sent=[s.buffer.recorded for s in shippers],
                        dropped=[s.dropped() for s in shippers],
                        unacked=[s.unacknowledged() for s in shippers],
                        resent=[s.resent for s in shippers], seconds=seconds)
    for s in shippers:
        s.stop(2.0)
    Path(out).write_text(json.dumps(asdict(result)))


class Load:
    """The driver process: ``start()`` connects the ranks, ``go()`` starts the clock."""

    def __init__(self, plan: LoadPlan, workdir: Path) -> None:
        self.plan = plan
        self._out = workdir / f"load-{plan.job}.json"
        ctx = mp.get_context("spawn")
        self._ready, self._go = ctx.Event(), ctx.Event()
        self._proc = ctx.Process(target=_drive, args=(plan, str(self._out), self._ready,
                                                      self._go), daemon=True)

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def start(self) -> Load:
        self._proc.start()
        if not self._ready.wait(120):
            raise RuntimeError("the load driver did not start within 120 s")
        return self

    def go(self) -> None:
        self._go.set()

    def result(self, timeout: float) -> LoadResult:
        """Wait for the end of the sending window and the drain."""
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            raise RuntimeError("the load driver did not finish in time")
        return LoadResult(**json.loads(self._out.read_text()))
