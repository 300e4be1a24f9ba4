"""What the per-job Prometheus series cost the daemon: ``JobSeries.observe`` runs in the
writer thread on every stored op batch, ``collect`` on every scrape.

    python -m bench.job_series [--jobs 256] [--rows 16384] [--ranks 8]

Prints one table: microseconds per observed batch (and per row), and per scrape of ``--jobs``
jobs (each with its step to find).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from c4.proto.codec import Columns
from diagnosis.daemon.job_series import JobSeries
from diagnosis.store import OpRows, Write

T0 = 1_700_000_000_000_000_000
PATTERN = [("world", "all_reduce", 25 << 20), ("world", "all_reduce", 25 << 20),
           ("world", "all_reduce", 7 << 20), ("tp", "all_gather", 1 << 20)]


def batch(job: str, rows: int, ranks: int, start: int) -> Write:
    """``rows`` calls of a DDP-like loop over ``ranks`` ranks, 100 ms steps."""
    per_rank = rows // ranks
    k = np.arange(per_rank) + start
    strings = ["world", "tp", "all_reduce", "all_gather"]
    pg = np.array([strings.index(PATTERN[i % 4][0]) for i in range(per_rank)], np.uint32)
    op = np.array([strings.index(PATTERN[i % 4][1]) for i in range(per_rank)], np.uint32)
    nbytes = np.array([PATTERN[i % 4][2] for i in range(per_rank)], np.int64)
    enter = T0 + (k // 4) * 100_000_000 + (k % 4) * 20_000_000
    cols = {
        "rank": np.repeat(np.arange(ranks, dtype=np.int32), per_rank),
        "pg": np.tile(pg, ranks), "seq": np.tile(k, ranks), "op": np.tile(op, ranks),
        "nbytes": np.tile(nbytes, ranks), "dtype": np.zeros(per_rank * ranks, np.uint32),
        "t_enter_ns": np.tile(enter, ranks), "t_start_ns": np.tile(enter + 1000, ranks),
        "t_end_ns": np.tile(enter + 5_000_000, ranks),
        "status": np.zeros(per_rank * ranks, np.uint8),
        "peer": np.full(per_rank * ranks, -1, np.int32)}
    return Write("bench", 1, OpRows(job, 0, Columns(cols, strings)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=256)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--ranks", type=int, default=8)
    args = ap.parse_args()
    series = JobSeries(max_jobs=args.jobs)
    writes = [batch(f"job{j}", args.rows, args.ranks, 0) for j in range(args.jobs)]
    t0 = time.perf_counter()
    for w in writes:
        series.observe([w])
    observe_s = (time.perf_counter() - t0) / len(writes)
    t0 = time.perf_counter()
    families = list(series.collect())       # finds every job's step
    first_scrape_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    list(series.collect())                  # nothing new: steps cached
    scrape_s = time.perf_counter() - t0
    steps = [s.value for f in families if f.name == "c4_job_step_seconds" for s in f.samples]
    print(f"{'what':<40} {'value':>12}")
    print(f"{'observe one batch (us)':<40} {observe_s * 1e6:>12.0f}")
    print(f"{'observe per row (ns)':<40} {observe_s * 1e9 / args.rows:>12.0f}")
    print(f"{f'scrape, {args.jobs} jobs, steps found (ms)':<40} {first_scrape_s * 1e3:>12.1f}")
    print(f"{f'scrape, {args.jobs} jobs, steps cached (ms)':<40} {scrape_s * 1e3:>12.1f}")
    print(f"{'jobs with a step (of ' + str(args.jobs) + ')':<40} {len(steps):>12d}")
    print(f"{'median step found (s; loop: 0.1)':<40} {float(np.median(steps)):>12.3f}")


if __name__ == "__main__":
    main()
