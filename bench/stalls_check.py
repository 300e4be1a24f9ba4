"""CPU cost of judging finished calls for stalls after the fact (diagnosis.engine.stalls), the
check every op batch now passes through, per million op rows.

    python -m bench.stalls_check [--rows 1000000] [--members 8] [--batch 65536]

Prints a table: rows, batch size, CPU seconds (process time, not wall time), ns per row.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--members", type=int, default=8, help="ranks per communicator")
    ap.add_argument("--batch", type=int, default=65536, help="rows per op batch")
    args = ap.parse_args()

    from diagnosis.engine import Engine

    eng = Engine()
    groups = 64
    for gi in range(groups):
        eng.add_group(f"tp-{gi}", list(range(gi * args.members, (gi + 1) * args.members)))
    rng = np.random.default_rng(0)
    n = args.rows - args.rows % args.members
    calls = n // args.members
    g = np.repeat(np.arange(calls) % groups, args.members).astype(np.int64)
    seq = np.repeat(np.arange(calls) // groups, args.members).astype(np.int64)
    rank = (g * args.members + np.tile(np.arange(args.members), calls)).astype(np.int64)
    enter = (seq * 10_000_000 + rng.integers(0, 200_000, n)).astype(np.int64)
    end = enter + 3_000_000
    status = np.zeros(n, dtype=np.int8)
    op = np.zeros(n, dtype=np.int64)
    # one call in 5,000 has a member 20 s late (a stall): the path that files reports runs too
    late = rng.choice(calls, max(1, calls // 5000), replace=False)
    for c in late.tolist():
        enter[c * args.members] += 20_000_000_000
    t0 = time.process_time()
    for s in range(0, n, args.batch):
        sl = slice(s, s + args.batch)
        eng.stalls.check(rank[sl], g[sl], seq[sl], op[sl], enter[sl], end[sl], status[sl])
    cpu = time.process_time() - t0
    print(f"{'rows':>10} {'batch':>7} {'members':>7} {'CPU s':>7} {'ns/row':>7} "
          f"{'reports':>7}")
    print(f"{n:>10,} {args.batch:>7,} {args.members:>7} {cpu:>7.3f} {cpu / n * 1e9:>7.1f} "
          f"{len(eng.reporter.all()):>7}")


if __name__ == "__main__":
    main()
