"""What reading NCCL Inspector files costs: offline (records per CPU second) and while
following a directory that grows as a running job's does (share of one core).

    python -m bench.nccl_read                                  # both parts, defaults below
    python -m bench.nccl_read --records 1000000 --follow-s 0   # offline only
    python -m bench.nccl_read --records 0 --ranks 8 --rate 400 --follow-s 30

Lines are written in the Inspector's own layout (the one ``c4 sim --as nccl-inspector``
writes: ``header``, ``metadata``, then ``coll_perf`` or ``p2p_perf``), one file per process,
a fifth of them point-to-point with ``"nan"`` bandwidths; ``verbose`` lines carry the
``event_trace_*`` objects (what ``c4 run --nccl-inspector`` turns on).

Offline: every file through ``read_inspector_file`` (typed msgspec structs; the numpy scanner
and the JSON path for a block they refuse) in this process, CPU time (``time.process_time``);
the files in one process per core as ``c4 analyze --jobs`` reads them, wall time (and the CPU
time of all those processes, which says what the wall time would be on free cores); and a sample
through orjson alone and the JSON path alone for comparison. On a machine shared
with other work CPU time still grows (cores and caches are shared): compare the reader with
the orjson row of the same run.

Following: a writer process appends ``rate`` records/s to each of ``ranks`` files, in bursts
at the Inspector's dump interval (100 ms, as ``c4 run`` sets it); this process runs what the
sidecar runs (``NcclNode.step``: follow, reconcile, convert to c4's op rows) every
``--interval`` seconds and reports that thread's CPU time over the wall time.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from diagnosis.sim.inspector import _COLL, _HEAD, _P2P, _VERBOSE

_HOST = "bench-node"
_PID0 = 4000


def inspector_lines(rank: int, ranks: int, first: int, n: int, t0_us: int,
                    verbose: bool) -> str:
    """``n`` lines of process ``rank`` starting at its ``first`` call: 4 of 5 all-reduces on
    the data-parallel communicator, 1 of 5 a send to the next rank (``"nan"`` bandwidths)."""
    out = []
    for k in range(first, first + n):
        t = t0_us + k * 1000
        if k % 5 == 4:
            kind = "p2p"
            head = _HEAD % ("0x51c2f00e0b1f2a", "PP 0", rank, ranks, 1, t, _HOST, _PID0 + rank)
            v = _VERBOSE % (kind, kind, kind, t - 40, kind, t - 37, t - 25, t, t) if verbose \
                else ""
            body = _P2P % ("Send", k // 5 + 1, (rank + 1) % ranks, 1 << 20, 0, '"nan"',
                           '"nan"', v)
        else:
            kind = "coll"
            head = _HEAD % ("0x7f8c496ae9f661", "DP Group 0", rank, ranks, 1, t, _HOST,
                            _PID0 + rank)
            v = _VERBOSE % (kind, kind, kind, t - 200, kind, t - 197, t - 180, t, t) \
                if verbose else ""
            body = _COLL % ("AllReduce", k - k // 5, 64 << 20, 180, "372.827", "652.447", v)
        out.append(head + body)
    return "".join(out)


def write_dir(root: Path, ranks: int, per_rank: int, verbose: bool) -> int:
    root.mkdir(parents=True, exist_ok=True)
    size = 0
    for r in range(ranks):
        path = root / f"{_HOST}-pid{_PID0 + r}.log"
        with open(path, "w") as fh:
            for first in range(0, per_rank, 50_000):
                fh.write(inspector_lines(r, ranks, first, min(50_000, per_rank - first),
                                         1_700_000_000_000_000, verbose))
        size += path.stat().st_size
    return size


def _children_cpu() -> float:
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _best(repeat: int, run: Callable[[], int]) -> tuple[int, float, float]:
    """The fewest seconds of ``repeat`` runs of ``run`` (which returns its record count), as
    (records, CPU seconds of this process and its reaped children, wall seconds): other work
    on the machine only ever adds time."""
    best = (0, math.inf, math.inf)
    for _ in range(repeat):
        w0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        n = run()
        cpu = time.process_time() - c0 + _children_cpu() - k0
        wall = time.perf_counter() - w0
        best = (n, min(best[1], cpu), min(best[2], wall))
    return best


def offline(records: int, ranks: int, work: Path, repeat: int = 1) -> None:
    print(f"\nreading Inspector files offline: {records:,} records in {ranks} files, one "
          f"process, CPU time{f', best of {repeat} runs' if repeat > 1 else ''}")
    print(f"{'lines':<9} {'MB':>7} {'reader':<13} {'records':>10} {'cpu s':>7} "
          f"{'records/s':>11} {'MB/s':>7}")
    for verbose in (False, True):
        d = work / f"offline-{int(verbose)}"
        size = write_dir(d, ranks, records // ranks, verbose)
        n = _offline_rows("verbose" if verbose else "compact", d, size, repeat)
        assert n == records // ranks * ranks, (n, records)


def _offline_rows(label: str, d: Path, size: int, repeat: int) -> int:
    """The rows of one kind of lines; the number of records the reader read."""
    import orjson

    from diagnosis.nccl.inspector import find_inspector_files, parse_lines, read_inspector_file
    from diagnosis.nccl.problems import Problems
    from diagnosis.nccl.sources import read_sources

    files = find_inspector_files(d)
    problems = Problems()
    n, cpu, _ = _best(repeat, lambda: sum(
        len(b) for f in files for b in read_inspector_file(f, problems=problems)))
    print(f"{label:<9} {size / 1e6:7.1f} {'reader':<13} {n:10,} {cpu:7.2f} "
          f"{n / cpu:11,.0f} {size / 1e6 / cpu:7.1f}")
    # what `c4 analyze --nccl-inspector DIR --jobs N` does: the files in N processes (wall
    # time: the CPU time is spread over the workers). The CPU time of this process and of the
    # workers (reaped when the pool closes) is beside it: on a machine whose cores other work
    # holds, the wall time says little
    workers = max(2, os.cpu_count() or 1)
    got, cpu, wall = _best(repeat, lambda: read_sources([d], workers=workers).n_ops)
    print(f"{label:<9} {'':>7} {f'{workers} processes':<13} {got:10,} {wall:7.2f} "
          f"{got / wall:11,.0f} {size / 1e6 / wall:7.1f}   (wall seconds; "
          f"{got / cpu:,.0f} per CPU second of all {workers + 1} processes)")
    sample = files[0].read_bytes().split(b"\n")[:100_000]
    # each parsed line dropped at once, as a per-line reader would
    m, cpu, _ = _best(repeat, lambda: sum(orjson.loads(line or b"0") is not None
                                          for line in sample))
    print(f"{label:<9} {'':>7} {'orjson alone':<13} {m:10,} {cpu:7.2f} "
          f"{m / cpu:11,.0f}   (parsing only: the floor of any per-line path)")
    m, cpu, _ = _best(repeat, lambda: len(parse_lines(sample, 1, str(files[0]), Problems())))
    print(f"{label:<9} {'':>7} {'JSON path':<13} {m:10,} {cpu:7.2f} {m / cpu:11,.0f}")
    return n


_WRITER = r"""
import sys, time
from pathlib import Path
from bench.nccl_read import inspector_lines, _HOST, _PID0
root, ranks, rate, seconds, dump_s = Path(sys.argv[1]), *map(float, sys.argv[2:])
ranks = int(ranks)
per_dump = rate * dump_s
done = [0] * ranks
t0 = time.monotonic()
fhs = [open(root / f"{_HOST}-pid{_PID0 + r}.log", "a") for r in range(ranks)]
k = 0
while (now := time.monotonic()) - t0 < seconds:
    k += 1
    for r, fh in enumerate(fhs):
        # each process dumps at its own phase: spread them over the interval
        n = int(k * per_dump) - done[r]
        fh.write(inspector_lines(r, ranks, done[r], n, 1_700_000_000_000_000, True))
        fh.flush()
        done[r] += n
    time.sleep(max(0.0, t0 + k * dump_s - time.monotonic()))
print(sum(done), flush=True)
"""


def follow(ranks: int, rate: float, seconds: float, interval: float, work: Path) -> None:
    from diagnosis.nccl.live import NcclNode

    d = work / "follow"
    d.mkdir(parents=True, exist_ok=True)
    node = NcclNode(inspector_dir=d, rank_of=lambda pid: pid - _PID0,
                    world_of=lambda pid: ranks, hosts={_HOST})
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(d), str(ranks), str(rate),
                               str(seconds), "0.1"], stdout=subprocess.PIPE, text=True)
    cpu = 0.0
    rows = steps = 0
    t0 = time.monotonic()
    while writer.poll() is None:
        time.sleep(max(0.0, t0 + (steps + 1) * interval - time.monotonic()))
        c0 = time.thread_time()
        recs = node.step()
        cpu += time.thread_time() - c0
        steps += 1
        rows += len(recs.ops) if recs.ops is not None else 0
    wall = time.monotonic() - t0
    written = int(writer.communicate()[0].strip() or 0)
    c0 = time.thread_time()
    recs = node.step()                       # what the last poll had not seen yet
    cpu += time.thread_time() - c0
    rows += len(recs.ops) if recs.ops is not None else 0
    print(f"\nfollowing a growing Inspector directory: {ranks} processes x {rate:.0f} "
          f"records/s, dumps every 100 ms, read every {interval:g} s, {wall:.0f} s")
    print(f"{'written':>9} {'shipped':>9} {'steps':>6} {'cpu s':>7} {'cpu ms/step':>12} "
          f"{'% of one core':>14}")
    print(f"{written:9,} {rows:9,} {steps:6} {cpu:7.3f} {1000 * cpu / max(steps, 1):12.2f} "
          f"{100 * cpu / wall:13.2f}%")
    if rows != written:
        print(f"  MISMATCH: {written - rows} records written but not shipped", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    import logging

    # every file has "nan" bandwidths (point-to-point calls): one warning each, not the point
    logging.basicConfig(level=logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records read offline (0: skip)")
    ap.add_argument("--ranks", type=int, default=8, help="processes (files)")
    ap.add_argument("--rate", type=float, default=400.0, help="records/s per process")
    ap.add_argument("--follow-s", type=float, default=30.0, help="seconds of following (0: "
                    "skip)")
    ap.add_argument("--repeat", type=int, default=1, help="offline: the best of this many "
                    "runs of each row (a machine shared with other work only adds time)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between reads "
                    "(the sidecar's --nccl-interval)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="c4-nccl-read-") as tmp:
        if args.records:
            offline(args.records, args.ranks, Path(tmp), max(1, args.repeat))
        if args.follow_s:
            follow(args.ranks, args.rate, args.follow_s, args.interval, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
