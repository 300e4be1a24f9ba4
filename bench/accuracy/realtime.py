"""Can the engine keep up with a 16,384-GPU job in real time?

Simulates N iterations of a large job and feeds each iteration's records to
``diagnosis.engine.Engine`` as the daemon would (columnar op batches, conn records, then
``advance``), timing only the engine. Needed rate: records per second of the trace's own time;
achieved: records per second of engine wall time. Also reports peak memory.

    python -m bench.accuracy.realtime --gpus 16384 --iterations 6
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from bench.accuracy.analyze import conn_records, new_engine
from c4.proto.codec import Columns
from diagnosis.sim.config import SimConfig
from diagnosis.sim.model import Simulation


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--no-conns", action="store_true", help="op records only")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    cfg = SimConfig(gpus=args.gpus, iterations=args.iterations, microbatches=args.microbatches,
                    conns=not args.no_conns, seed=args.seed, warmup=(), checkpoint_every=0)
    t = time.perf_counter()
    sim = Simulation(cfg)
    eng = new_engine(sim)
    setup_s = time.perf_counter() - t
    n_ops = n_conns = 0
    engine_s = sim_s = engine_cpu = 0.0
    first = last = None
    per_iter = []
    batches = sim.run()
    while True:
        t = time.perf_counter()
        b = next(batches, None)
        sim_s += time.perf_counter() - t
        if b is None:
            break
        ops = Columns(dict(b.ops), list(sim.strings))
        conns = conn_records(sim, b.conns) if len(b.conns["conn"]) else None
        now = int(b.ops["t_end_ns"].max())
        first = int(b.ops["t_enter_ns"].min()) if first is None else first
        last = now
        t, c = time.perf_counter(), time.process_time()
        eng.add_ops(ops)
        if conns is not None:
            eng.add_conns(conns)
        reports = eng.advance(now)
        dt = time.perf_counter() - t
        engine_s += dt
        engine_cpu += time.process_time() - c
        per_iter.append(dt)
        n_ops += len(ops)
        n_conns += 0 if conns is None else len(conns)
        print(f"  iteration {b.iteration}: {len(ops):,} ops, "
              f"{0 if conns is None else len(conns):,} conns, engine {dt:.2f} s, "
              f"{len(reports)} reports", file=sys.stderr)
    t = time.perf_counter()
    final = eng.finish(sim.end_ns)
    finish_s = time.perf_counter() - t
    span_s = (last - first) / 1e9
    records = n_ops + n_conns
    need, got = records / span_s, records / engine_s
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nrealtime: {args.gpus:,} GPUs x {len(per_iter)} iterations, microbatches "
          f"{args.microbatches}, conns {'off' if args.no_conns else 'on'}")
    print(f"  records          {n_ops:,} ops + {n_conns:,} conns = {records:,}")
    print(f"  trace time       {span_s:.1f} s ({span_s / len(per_iter):.2f} s per iteration)")
    print(f"  needed           {need:,.0f} records/s")
    print(f"  achieved         {got:,.0f} records/s  (engine {engine_s:.1f} s, "
          f"{max(per_iter):.2f} s worst iteration; finish {finish_s:.2f} s)")
    print(f"  per CPU second   {records / engine_cpu:,.0f} records/s  (engine CPU "
          f"{engine_cpu:.1f} s: the figure on an idle core; load average now "
          f"{os.getloadavg()[0]:.1f})")
    print(f"  headroom         {got / need:.2f}x  -> "
          f"{'keeps up' if got >= need else 'FALLS BEHIND'}")
    print(f"  setup {setup_s:.1f} s, simulation {sim_s:.1f} s, peak RSS {rss_mb:.0f} MB, "
          f"{len(final)} reports at finish (healthy job: 0 expected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
