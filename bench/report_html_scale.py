"""Time and memory of ``c4 report --html --trace`` on simulated jobs of growing size.

    python -m bench.report_html_scale [--gpus 8 512 4096] [--iterations 6] [--no-conns]
                                      [--pages DIR]

Each size is simulated in one process (a job with a slow GPU and its connection samples, as
``c4 sim`` writes it) and its page built in a fresh one, whose peak RSS is the report's own:
read the trace, run the detectors and render the page. Prints a table: GPUs, trace size,
connection samples, fault reports, seconds (wall, and CPU of the process and its parsing
workers) to build the page, peak RSS (the larger of the process and its largest worker), page
size. ``--pages DIR`` keeps each page as DIR/report-<GPUs>.html, to look at (in headless
Chromium: ``chromium --headless --screenshot=shot.png --window-size=1400,4000 PAGE``). The
issue's target is 10 s and 500 MB at 4,096 GPUs; the machine this runs on may be shared (say
so).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _simulate(gpus: int, iterations: int, conns: bool, out: Path) -> None:
    from diagnosis.sim.config import FaultSpec, SimConfig
    from diagnosis.sim.run import simulate

    # a small job: two hosts, still data-parallel
    small = {"tp": 2, "pp": 2, "gpus_per_host": 4} if gpus < 64 else {}
    simulate(SimConfig(gpus=gpus, iterations=iterations, microbatches=2, conns=conns, **small,
                       faults=(FaultSpec.parse("slow_gpu:auto@2"),)), out)


def _build(out: Path) -> dict:
    from diagnosis.report_html import from_trace, render

    trace = out / "trace.jsonl"
    wall, cpu = time.perf_counter(), _cpu()
    data = from_trace(trace, topology=out / "topology.json")
    page = render(data)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    (out / "report.html").write_text(page)
    # the trace's parsing processes (large traces, several CPUs) count too
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF,
                                                             resource.RUSAGE_CHILDREN))
    return {"trace_mb": trace.stat().st_size / 2**20, "wall_s": wall, "cpu_s": cpu,
            "conns": 0 if data.transfers is None else len(data.transfers.src),
            "faults": len(data.faults), "peak_mb": peak / 1024, "page_kb": len(page) / 1024}


def _cpu() -> float:
    """CPU seconds of this process and of its finished children."""
    me, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "bench.report_html_scale", *args],
                          capture_output=True, text=True, check=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 512, 4096])
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--no-conns", action="store_true",
                    help="simulate without connection samples (calls only)")
    ap.add_argument("--pages", type=Path, help="keep each page here as report-<GPUs>.html")
    ap.add_argument("--simulate", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--build", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.simulate:
        _simulate(int(args.simulate[0]), args.iterations, not args.no_conns,
                  Path(args.simulate[1]))
        return
    if args.build:
        print(json.dumps(_build(Path(args.build))))
        return
    print(f"{'GPUs':>6} {'trace MB':>9} {'conns':>9} {'faults':>6} {'wall s':>7} "
          f"{'CPU s':>7} {'peak MB':>8} {'page KB':>8}", flush=True)
    for gpus in args.gpus:
        with tempfile.TemporaryDirectory() as tmp:
            _run("--simulate", str(gpus), tmp, "--iterations", str(args.iterations),
                 *(["--no-conns"] if args.no_conns else []))
            r = json.loads(_run("--build", tmp).strip().splitlines()[-1])
            if args.pages:
                args.pages.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(tmp) / "report.html", args.pages / f"report-{gpus}.html")
        print(f"{gpus:>6} {r['trace_mb']:>9.1f} {r['conns']:>9,} {r['faults']:>6} "
              f"{r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['peak_mb']:>8.0f} "
              f"{r['page_kb']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
