"""Store backends: op rows per second through ``write()`` and back through ``ops()``.

    python -m bench.store [--batches 30] [--rows 10000] [--stores sqlite,sqlite-memory,clickhouse]

Each ``write()`` call carries one 10,000-row OpBatch of a fresh request (what the daemon's group
commit hands over when one sidecar ships full batches), then the same with four batches per call;
"resend" repeats every request (all duplicates). Reads: the whole job through ``ops()``, the
first 1,000 rows, ``count_ops()`` and ``jobs()``. ClickHouse runs as a private server on
free ports (the binary from the clickhouse-server package).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from diagnosis.store import OpRows, RankRecord, Store, Write, open_store
from tests.diagnosis.store.store_builders import T0, make_ops


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _run(store: Store, batches: int, rows: int) -> dict[str, float]:
    store.write([Write("bench", 0, RankRecord("a", 0, 0, 64, "node0")),
                 Write("bench", 1, RankRecord("b", 0, 0, 64, "node0"))])
    # time moves on from batch to batch; within one, rows arrive out of order
    data = [make_ops(rows, seq0=k * rows, seed=k, ranks=64, t0=T0 + k * rows * 1000)
            for k in range(batches)]
    single = [[Write("bench", 10 + k, OpRows("a", 0, cols))] for k, cols in enumerate(data)]
    grouped = [[Write("bench", 100_000 + k + j, OpRows("b", 0, data[k + j]))
                for j in range(min(4, batches - k))] for k in range(0, batches, 4)]
    total = batches * rows
    out: dict[str, float] = {}
    out["write 1 batch/call"] = total / _timed(lambda: [store.write(w) for w in single])
    out["write 4 batches/call"] = total / _timed(lambda: [store.write(w) for w in grouped])
    out["resend, all duplicates ms/call"] = 1000 * _timed(
        lambda: [store.write(w) for w in single]) / len(single)
    assert store.count_ops("a") == total, "the store lost or doubled rows"
    out["ops() whole job"] = total / _timed(lambda: store.ops("a"))
    out["ops(limit=1000) ms"] = 1000 * _timed(lambda: store.ops("a", limit=1000))
    out["count_ops() ms"] = 1000 * _timed(lambda: store.count_ops("a"))
    out["jobs() ms"] = 1000 * _timed(store.jobs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=30, help="op batches written per run")
    ap.add_argument("--rows", type=int, default=10_000, help="rows per op batch")
    ap.add_argument("--stores", default="sqlite,sqlite-memory,clickhouse",
                    help="comma-separated: sqlite, sqlite-normal, sqlite-memory, clickhouse")
    args = ap.parse_args()
    console = Console()
    results: dict[str, dict[str, float]] = {}
    for name in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="c4-bench-store-") as d:
            tmp = Path(d)
            server = None
            if name == "sqlite":
                store: Store = open_store(f"sqlite:///{tmp / 'c4.db'}")
            elif name == "sqlite-normal":
                from diagnosis.store.sqlite import SQLiteStore

                store = SQLiteStore(str(tmp / "c4.db"), synchronous="NORMAL")
            elif name == "sqlite-memory":
                store = open_store("sqlite://:memory:")
            elif name == "clickhouse":
                from tests.support.clickhouse import ClickHouseServer, find_binary

                command = find_binary()
                if command is None:
                    console.print("clickhouse-server is not installed: skipping")
                    continue
                (tmp / "ch").mkdir()
                server = ClickHouseServer(tmp / "ch", command)
                server.start()
                store = open_store(server.url("c4_bench"))
            else:
                raise SystemExit(f"unknown store {name!r}")
            try:
                results[name] = _run(store, args.batches, args.rows)
            finally:
                store.close()
                if server is not None:
                    server.stop()
            console.print(f"{name}: done")
    table = Table(title=f"store backends, {args.batches} x {args.rows:,}-row op batches "
                        "(rows/s unless marked ms)")
    table.add_column("measure")
    for name in results:
        table.add_column(name, justify="right")
    for measure in next(iter(results.values()), {}):
        table.add_row(measure, *(f"{r[measure]:,.1f}" if " ms" in measure
                                 else f"{r[measure]:,.0f}" for r in results.values()))
    console.print(table)


if __name__ == "__main__":
    main()
