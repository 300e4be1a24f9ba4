"""How fast ``c4 analyze`` reads and diagnoses a trace: the reader per record kind (records/s and
MB/s, each kind's lines read alone), the reader on the whole trace, the engine alone (on batches
already read), the whole ``c4 analyze`` pipeline, in one process and with parser processes, and
the ``c4 analyze`` command itself (a subprocess: start-up, imports and topology included).

    python -m bench.analyze_speed [--gpus 512] [--iterations 20] [--layers 1] [--sample K]
    python -m bench.analyze_speed --trace DIR      # a directory written by ``c4 sim``

CPU seconds are printed beside wall seconds: on a shared machine the wall clock also measures
the neighbours. Each timing is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

KINDS = ("op", "conn", "progress", "linkstat", "port")
_TYPE = re.compile(rb'"type"\s*:\s*"([^"]*)"')


def _sim(gpus: int, iterations: int, layers: int, sample: int | None, out: Path) -> None:
    from diagnosis.sim.config import SimConfig
    from diagnosis.sim.run import simulate

    simulate(SimConfig(gpus=gpus, iterations=iterations, layers=layers, sample=sample), out)


def _cpu_of(who: int) -> float:
    use = resource.getrusage(who)
    return use.ru_utime + use.ru_stime


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the parser processes)."""
    return _cpu_of(resource.RUSAGE_SELF) + _cpu_of(resource.RUSAGE_CHILDREN)


def _timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """Median wall and CPU seconds of ``repeat`` calls of ``fn``, and its last result."""
    wall, cpu, _, out = _timed_split(fn, repeat)
    return wall, cpu, out


def _timed_split(fn: Callable[[], object], repeat: int) -> tuple[float, float, float, object]:
    """Median wall seconds, CPU seconds (all processes) and CPU seconds of this process alone
    of ``repeat`` calls of ``fn``, and its last result. With parser processes, this process
    (the engine) and the parsers run side by side: on an idle machine with a core each, the
    wall time is about the larger of the two, which a loaded machine's wall clock hides."""
    walls, cpus, mains, out = [], [], [], None
    for _ in range(repeat):
        t, c, m = time.perf_counter(), _cpu(), _cpu_of(resource.RUSAGE_SELF)
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(_cpu() - c)
        mains.append(_cpu_of(resource.RUSAGE_SELF) - m)
    return (statistics.median(walls), statistics.median(cpus), statistics.median(mains), out)


def _command(trace: Path, topology: Path | None) -> None:
    """``c4 analyze`` as a user runs it, reports written to nowhere."""
    args = [sys.executable, "-m", "c4", "analyze", str(trace), "-f", "json", "-o", "/dev/null"]
    if topology is not None:
        args += ["--topology", str(topology)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _split_by_kind(trace: Path, out: Path) -> dict[str, Path]:
    """The trace's telemetry lines, one file per record kind (the other lines left out)."""
    files = {k: (out / f"{k}.jsonl").open("wb") for k in KINDS}
    with trace.open("rb") as fh:
        for line in fh:
            m = _TYPE.search(line)
            kind = m.group(1).decode() if m else ""
            if kind in files:
                files[kind].write(line)
    for f in files.values():
        f.close()
    return {k: out / f"{k}.jsonl" for k in KINDS if (out / f"{k}.jsonl").stat().st_size}


def _read_all(path: Path) -> int:
    from diagnosis.trace import read_trace

    return sum(len(i) if hasattr(i, "__len__") else 1 for i in read_trace(path))


def _engine(items: list, topo) -> int:
    from diagnosis.engine import Engine
    from diagnosis.trace.feed import FeedStats, _add

    eng, stats = Engine(topo), FeedStats()
    for it in items:
        _add(eng, it, stats, "bench")
        eng.advance(eng.now_ns)
    return len(eng.finish(stats.end_ns))


def _row(name: str, records: int, nbytes: int, wall: float, cpu: float) -> str:
    return (f"{name:<28}{records:>11,}{nbytes / 1e6:>8.0f}{wall:>8.2f}{cpu:>8.2f}"
            f"{records / max(cpu, 1e-9):>13,.0f}{nbytes / 1e6 / max(cpu, 1e-9):>8.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--sample", type=int, default=None, help="simulate a version 2 trace "
                    "keeping 1 call in K")
    ap.add_argument("--trace", type=Path, help="directory with trace.jsonl and topology.json")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing (the median is "
                    "printed)")
    ap.add_argument("--no-kinds", action="store_true", help="skip the per-kind read timings")
    args = ap.parse_args()

    from c4.topology import Topology
    from diagnosis.engine import Engine
    from diagnosis.trace import read_trace
    from diagnosis.trace.feed import feed_trace
    from diagnosis.trace.parallel import default_workers

    with tempfile.TemporaryDirectory() as tmp:
        d = args.trace or Path(tmp)
        if args.trace is None:
            t = time.perf_counter()
            _sim(args.gpus, args.iterations, args.layers, args.sample, d)
            print(f"simulated {args.gpus} GPUs x {args.iterations} iterations in "
                  f"{time.perf_counter() - t:.1f} s")
        trace = d / "trace.jsonl"
        topo_path = d / "topology.json"
        topo = Topology.load(topo_path) if topo_path.exists() else None
        size = trace.stat().st_size

        header = (f"{'read':<28}{'records':>11}{'MB':>8}{'wall s':>8}{'cpu s':>8}"
                  f"{'records/s':>13}{'MB/s':>8}")
        rows = []
        if not args.no_kinds:
            parts = Path(tmp) / "kinds"
            parts.mkdir()
            for kind, path in _split_by_kind(trace, parts).items():
                wall, cpu, n = _timed(lambda p=path: _read_all(p), args.repeat)
                rows.append(_row(kind, n, path.stat().st_size, wall, cpu))
                path.unlink()
        wall, cpu, _ = _timed(lambda: _read_all(trace), args.repeat)
        items = list(read_trace(trace))
        records = sum(len(i) if hasattr(i, "__len__") else 1 for i in items)
        rows.append(_row("whole trace", records, size, wall, cpu))
        print(f"trace: {trace}, {size / 1e6:.0f} MB, {records:,} records "
              f"(CPU s and rates: median of {args.repeat})")
        print(header)
        print("\n".join(rows))

        e_wall, e_cpu, n_reports = _timed(lambda its=items: _engine(its, topo), args.repeat)
        del items
        workers = max(1, default_workers())
        a_wall, a_cpu, a_main, _ = _timed_split(
            lambda: feed_trace(Engine(topo), trace, workers=0), args.repeat)
        p_wall, p_cpu, p_main, _ = _timed_split(
            lambda: feed_trace(Engine(topo), trace, workers=workers), args.repeat)
        c_wall, c_cpu, _, _ = _timed_split(
            lambda: _command(trace, topo_path if topo_path.exists() else None), args.repeat)

    print(f"\n{'analyze':<40}{'wall s':>8}{'cpu s':>8}{'main cpu s':>12}"
          f"{'parsers cpu s':>15}{'records/s (wall)':>18}")
    for name, wall, cpu, main_cpu in (
            ("engine alone (batches already read)", e_wall, e_cpu, e_cpu),
            ("read + engine, 1 process (--jobs 0)", a_wall, a_cpu, a_main),
            (f"read + engine, {workers} parser process(es)", p_wall, p_cpu, p_main),
            ("c4 analyze command (default --jobs)", c_wall, c_cpu, None)):
        split = "" if main_cpu is None else \
            f"{main_cpu:>12.2f}{max(cpu - main_cpu, 0.0):>15.2f}"
        print(f"{name:<40}{wall:>8.2f}{cpu:>8.2f}{split:>27}{records / wall:>18,.0f}")
    print(f"{n_reports} report(s); cpu s counts every process; with parser processes the "
          "engine's process (main) and the parsers run side by side, so on an idle machine "
          "with a core for each the wall time is about the larger of the two; the command's "
          "CPU is not split by process")


if __name__ == "__main__":
    main()
