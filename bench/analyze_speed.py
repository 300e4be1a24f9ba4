"""Records per second through ``c4 analyze``'s pipeline: the trace reader alone, the engine alone
(on batches already parsed), and both together, on a simulated trace.

    python -m bench.analyze_speed [--gpus 512] [--iterations 20] [--trace DIR]

``--trace DIR`` reuses a directory written by ``c4 sim`` (trace.jsonl + topology.json).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _sim(gpus: int, iterations: int, out: Path) -> None:
    from diagnosis.sim.config import SimConfig
    from diagnosis.sim.run import simulate

    simulate(SimConfig(gpus=gpus, iterations=iterations, microbatches=2), out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--trace", type=Path, help="directory with trace.jsonl and topology.json")
    args = ap.parse_args()

    from diagnosis.engine import ConnRecords, Engine
    from diagnosis.topology import Topology
    from diagnosis.trace import GroupInfo, RankInfo, read_trace
    from diagnosis.trace.feed import feed_trace
    from diagnosis.trace.parallel import default_workers
    from proto.codec import Columns

    with tempfile.TemporaryDirectory() as tmp:
        d = args.trace or Path(tmp)
        if args.trace is None:
            t = time.perf_counter()
            _sim(args.gpus, args.iterations, d)
            print(f"simulated {args.gpus} GPUs x {args.iterations} iterations in "
                  f"{time.perf_counter() - t:.1f} s")
        trace, topo = d / "trace.jsonl", Topology.load(d / "topology.json")
        size = trace.stat().st_size

        t, c = time.perf_counter(), time.process_time()
        items = list(read_trace(trace))
        read_s = (time.perf_counter() - t, time.process_time() - c)
        records = sum(len(i) if isinstance(i, (Columns, ConnRecords)) else 1 for i in items)

        eng = Engine(topo)
        t, c = time.perf_counter(), time.process_time()
        for it in items:
            if isinstance(it, Columns):
                eng.add_ops(it)
                eng.advance(eng.now_ns)
            elif isinstance(it, ConnRecords):
                eng.add_conns(it)
            elif isinstance(it, RankInfo):
                eng.add_rank(it.rank, it.host, it.gpu, it.nic)
            elif isinstance(it, GroupInfo):
                eng.add_group(it.pg, it.ranks)
        eng.finish()
        engine_s = (time.perf_counter() - t, time.process_time() - c)
        del items

        t, c = time.perf_counter(), time.process_time()
        reports, _ = feed_trace(Engine(topo), trace)
        total_s = (time.perf_counter() - t, time.process_time() - c)
        workers = max(1, default_workers())
        t, c = time.perf_counter(), time.process_time()
        feed_trace(Engine(topo), trace, workers=workers, block_bytes=1 << 20,
                   min_parallel_bytes=0)
        par_s = (time.perf_counter() - t, time.process_time() - c)

    print(f"trace: {records:,} records, {size / 1e6:.0f} MB, {len(reports)} report(s)")
    # CPU seconds as well as wall: on a shared machine the wall clock measures the neighbours
    # (the parallel row's CPU is the main process only: compare its wall time)
    print(f"{'stage':<24}{'wall s':>8}{'cpu s':>8}{'records/s (wall)':>18}{'(cpu)':>12}")
    for name, (wall, cpu) in (("read (orjson)", read_s), ("engine", engine_s),
                              ("analyze (both)", total_s),
                              (f"analyze, {workers} parser(s)", par_s)):
        print(f"{name:<24}{wall:>8.2f}{cpu:>8.2f}{records / wall:>18,.0f}"
              f"{records / max(cpu, 1e-9):>12,.0f}")


if __name__ == "__main__":
    main()
