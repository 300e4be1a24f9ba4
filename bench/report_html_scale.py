"""Time and memory of ``c4 report --html --trace`` on simulated jobs of growing size.

    python -m bench.report_html_scale [--gpus 512 4096] [--iterations 6]

Each size runs in a fresh process (its peak RSS is its own): simulate a job with a slow link
(``c4 sim``), then read the trace, run the detectors and render the page. Prints a table:
GPUs, trace size, seconds (wall and CPU) to build the page, peak RSS, page size. The issue's
target is 10 s and 500 MB at 4,096 GPUs; the machine this runs on may be shared (say so).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _one(gpus: int, iterations: int) -> dict:
    from diagnosis.report_html import from_trace, render
    from diagnosis.sim.config import FaultSpec, SimConfig
    from diagnosis.sim.run import simulate

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        simulate(SimConfig(gpus=gpus, iterations=iterations, microbatches=2, conns=False,
                           faults=(FaultSpec.parse("slow_link:auto@2"),)), out)
        trace = out / "trace.jsonl"
        wall, cpu = time.perf_counter(), time.process_time()
        page = render(from_trace(trace, topology=out / "topology.json"))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {"gpus": gpus, "trace_mb": trace.stat().st_size / 2**20, "wall_s": wall,
                "cpu_s": cpu, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                / 1024, "page_kb": len(page) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.iterations)))
        return
    print(f"{'GPUs':>6} {'trace MB':>9} {'wall s':>7} {'CPU s':>7} {'peak MB':>8} "
          f"{'page KB':>8}")
    for gpus in args.gpus:
        res = subprocess.run([sys.executable, "-m", "bench.report_html_scale", "--one",
                              str(gpus), "--iterations", str(args.iterations)],
                             capture_output=True, text=True, check=True)
        r = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{r['gpus']:>6} {r['trace_mb']:>9.1f} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} "
              f"{r['peak_mb']:>8.0f} {r['page_kb']:>8.0f}")


if __name__ == "__main__":
    main()
