"""Ingest throughput: records per second from sidecars into a real daemon over loopback.

    python -m bench.ingest [--records 4000000] [--stores memory,sqlite,clickhouse]

Two paths per store backend:
- outbox -> daemon: the sidecar's delivery code streaming prebuilt 16,384-record batches
  (what one sidecar can push and the daemon can take);
- ranks -> sidecar -> daemon: 8 rank connections writing collector frames to a real sidecar
  process, which merges, numbers, ships and waits for acknowledgements.
The daemon runs its full path: decode, validate, group commit into the store, live detectors,
acknowledgement. "memory" is the daemon's in-memory path (a store that keeps rows in RAM).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.stores import store_url
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.spill import Spill
from diagnosis.client import DaemonClient
from tests.support.frames import RankConnection, group_info, op_batch, rank_info
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

BATCH = 16384


def _outbox_run(port: int, job: str, records: int, tmp: Path) -> float:
    """Seconds to deliver ``records`` op records through the sidecar's outbox, acknowledged."""
    box = Outbox(f"bench-{job}", Spill(tmp / f"spill-{job}", 1 << 32),
                 memory_max_bytes=4 << 30, max_inflight=32, spill_after_s=30)
    stop = threading.Event()
    box.put(rank=rank_info(job, 0, 1, "node0").rank)
    template = op_batch(job, 0, range(BATCH)).ops
    nbatches = records // BATCH
    t0 = time.perf_counter()
    runner = threading.Thread(target=box.run, args=(f"127.0.0.1:{port}", stop), daemon=True)
    runner.start()
    for _ in range(nbatches):
        box.put(ops=template)
    wait_for(box.idle, 600, interval=0.005, what="all batches acknowledged")
    elapsed = time.perf_counter() - t0
    stop.set()
    runner.join(10)
    return nbatches * BATCH / elapsed


def _sidecar_run(port: int, job: str, records: int, tmp: Path) -> float:
    car, sock = start_sidecar(tmp, port, "node0", name=f"sidecar-{job}")
    try:
        ranks = 8
        per_rank = records // ranks
        chunk = 2048  # a collector flushes every ~100 ms: a few thousand records per frame
        conns = [RankConnection(sock) for _ in range(ranks)]
        for r, c in enumerate(conns):
            c.send(rank_info(job, r, ranks, "node0"), group_info(job, "0", list(range(ranks))))
        frames = {r: [op_batch(job, r, range(i, i + chunk)) for i in range(0, per_rank, chunk)]
                  for r in range(ranks)}
        total = sum(len(f) for f in frames.values()) * chunk
        with DaemonClient(f"127.0.0.1:{port}") as client:
            t0 = time.perf_counter()
            threads = [threading.Thread(target=c.send, args=tuple(frames[r]))
                       for r, c in enumerate(conns)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # Poll gently: counting stored rows is itself work for the daemon.
            wait_for(lambda: _stored(client, job) >= total, 600, interval=0.5,
                     what=f"{total} records stored")
            elapsed = time.perf_counter() - t0
        for c in conns:
            c.close()
        return total / elapsed
    finally:
        car.stop()


def _stored(client: DaemonClient, job: str) -> int:
    return sum(j.ops for j in client.jobs() if j.job == job)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=4_000_000)
    ap.add_argument("--stores", default="memory,sqlite,clickhouse")
    args = ap.parse_args(argv)
    console = Console()
    table = Table(title=f"ingest into one daemon on loopback ({args.records:,} records per run)")
    for col in ("store", "outbox -> daemon (records/s)", "ranks -> sidecar -> daemon (records/s)"):
        table.add_column(col, justify="right")
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="c4-bench-") as d:
            tmp = Path(d)
            found = store_url(store, tmp)
            if found is None:
                console.print("clickhouse-server not installed: skipping")
                continue
            url, server = found
            port = free_port()
            daemon = start_daemon(tmp, port, url)
            try:
                a = _outbox_run(port, "bench-a", args.records, tmp)
                b = _sidecar_run(port, "bench-b", args.records, tmp)
            finally:
                daemon.stop()
                if server is not None:
                    server.stop()
            table.add_row(store, f"{a:,.0f}", f"{b:,.0f}")
            console.print(f"{store}: outbox {a:,.0f}/s, sidecar {b:,.0f}/s")
    console.print(table)


if __name__ == "__main__":
    main()
