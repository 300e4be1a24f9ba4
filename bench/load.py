"""A whole cluster's telemetry into one daemon: many ranks, real sidecars, a bounded rate.

    python -m bench.load [--ranks 16384] [--sidecars 8] [--minutes 10]
                         [--store memory|sqlite|clickhouse[,...]] [--rate 32768]

A simulated job of ``--ranks`` ranks, spread evenly over ``--sidecars`` real ``c4 sidecar``
processes (one per "node"), streams into one ``c4 daemon``. Every simulated rank holds its own
Unix-socket connection to its node's sidecar and speaks the collector wire, like a real
collector: a RankInfo frame, then one op frame every ``--frame-interval`` seconds holding the
all_reduce calls it made since (every rank the same sequence numbers, enter times spread by a
little jitter). The load generators (``--drivers`` processes) are paced to ``--rate`` records per
second in total, so the figures say what the daemon sustains at that rate rather than how fast
this machine can build frames; the achieved rate is printed beside the target.

Measured per store:
- records/s sustained: records stored (the daemon's ingest counter) over the run;
- ingest lag: when the daemon's stored count reaches N, how long ago the generators had sent N
  records (first in, first out across all sidecars; sends sampled every 0.1 s, the stored
  count every ``--poll-s``): p50, p99, max;
- daemon RSS from /proc, sampled every 2 s: first minute, peak, last, and its slope over the
  second half of the run (MiB per minute);
- records lost: sent minus stored (the job's stored op count) after the sidecars drained;
- the live detectors' lag, from the daemon's ``c4_daemon_live_lag_seconds`` (the age of the
  oldest stored record they have not finished judging), sampled every 2 s, and the mean
  duration of one analysis pass;
- CPU seconds per million records of each part (generator, sidecars, daemon, ClickHouse) over
  the sending window, and the machine's load average, to tell which part limits the rate.

The generators prebuild every rank's frame (``FrameBank``) and rewrite only the sequence and
time columns in place, so sending a frame costs one ``sendall``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

JOB = "load"
PG = "0"


@dataclass(frozen=True)
class DriverPlan:
    """What one load-generator process drives: some sidecars and their ranks."""

    sockets: tuple[str, ...]
    first_rank: tuple[int, ...]   # global rank of each sidecar's local rank 0
    ranks_per_sidecar: int
    world: int
    records_per_frame: int
    frame_interval_s: float
    duration_s: float


class FrameBank:
    """Every rank's op frame, prebuilt: one row of bytes per rank, the changing columns (seq,
    enter and end times) rewritten in place with numpy before each send, so a frame costs one
    ``sendall`` and no protobuf work. The layout is protobuf's own: the frame is serialised
    once with marker columns and each column's bytes are found in it."""

    VARYING = ("seq", "t_enter_ns", "t_end_ns")

    def __init__(self, ranks: np.ndarray, k: int) -> None:
        from c4.proto import c4_pb2
        from c4.proto.codec import OP_COLUMNS
        from collectors.wire import encode_frame

        self.k = k
        rng = np.random.default_rng(0)
        base = {
            "rank": np.zeros(k, np.int32), "pg": np.zeros(k, np.uint32),
            "seq": np.zeros(k, np.int64), "op": np.full(k, 2, np.uint32),
            "nbytes": np.full(k, 1 << 20, np.int64), "dtype": np.ones(k, np.uint32),
            "t_enter_ns": np.zeros(k, np.int64), "t_start_ns": np.full(k, -1, np.int64),
            "t_end_ns": np.zeros(k, np.int64), "status": np.zeros(k, np.uint8),
            "peer": np.full(k, -1, np.int32)}
        # markers: random bytes that occur once in the serialised frame
        markers = {c: rng.integers(1, 255, k * OP_COLUMNS[c].itemsize, dtype=np.uint8)
                   for c in (*self.VARYING, "rank")}
        raw = {c: markers[c].tobytes() if c in markers else
               np.ascontiguousarray(v, OP_COLUMNS[c]).tobytes() for c, v in base.items()}
        template = encode_frame(c4_pb2.IngestRequest(ops=c4_pb2.OpBatch(
            job=JOB, count=k, strings=[PG, "float32", "all_reduce"], **raw)))
        self.offsets = {c: template.find(m.tobytes()) for c, m in markers.items()}
        if min(self.offsets.values()) < 0:
            raise RuntimeError("could not locate the columns in the frame template")
        self.frames = np.tile(np.frombuffer(template, np.uint8), (len(ranks), 1))
        self._view("rank", slice(None), OP_COLUMNS["rank"])[:] = ranks[:, None]

    def _view(self, col: str, rows: slice, dtype: np.dtype) -> np.ndarray:
        """The (rows, k) array of column ``col`` inside the frames (a copy if unaligned)."""
        off, width = self.offsets[col], self.k * np.dtype(dtype).itemsize
        return self.frames[rows, off:off + width].view(dtype)

    def stamp(self, lo: int, hi: int, seq0: int, now_ns: int, rng: np.random.Generator) -> None:
        """Rows ``lo:hi`` now hold calls ``seq0 .. seq0+k-1`` made over the last interval."""
        n, k = hi - lo, self.k
        seq = np.arange(seq0, seq0 + k, dtype=np.int64)
        enter = (now_ns - (k - 1 - np.arange(k)) * 1_000_000)[None, :] + \
            rng.integers(0, 50_000, (n, k))
        for col, values in (("seq", np.broadcast_to(seq, (n, k))), ("t_enter_ns", enter),
                            ("t_end_ns", enter + 800_000)):
            off, width = self.offsets[col], k * 8
            self.frames[lo:hi, off:off + width] = \
                np.ascontiguousarray(values, np.int64).view(np.uint8).reshape(n, width)


def _drive(plan: DriverPlan, sent: mp.Value, ready: mp.Event, go: mp.Event) -> None:
    """One generator process: connect every rank, then send paced op frames until the end."""
    from tests.support.frames import RankConnection, group_info, rank_info

    rng = np.random.default_rng(os.getpid())
    conns: list[tuple[RankConnection, int]] = []
    for sock, first in zip(plan.sockets, plan.first_rank):
        host = f"node{first // plan.ranks_per_sidecar}"
        for local in range(plan.ranks_per_sidecar):
            c = RankConnection(Path(sock))
            c.send(rank_info(JOB, first + local, plan.world, host))
            if first == 0 and local == 0:
                c.send(group_info(JOB, PG, list(range(plan.world))))
            conns.append((c, first + local))
    socks = [c.sock for c, _ in conns]
    bank = FrameBank(np.array([r for _, r in conns]), plan.records_per_frame)
    ready.set()
    go.wait()
    k = plan.records_per_frame
    # every frame of a tick goes out in this many slices, spread over the interval
    slices = max(1, min(len(conns), int(plan.frame_interval_s * 50)))
    bounds = np.linspace(0, len(conns), slices + 1).astype(int)
    t0 = time.monotonic()
    tick = 0
    while time.monotonic() - t0 < plan.duration_s:
        tick_start = t0 + tick * plan.frame_interval_s
        for s in range(slices):
            due = tick_start + plan.frame_interval_s * s / slices
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            lo, hi = int(bounds[s]), int(bounds[s + 1])
            if lo == hi:
                continue
            bank.stamp(lo, hi, tick * k, time.time_ns(), rng)
            frames = bank.frames
            for i in range(lo, hi):
                socks[i].sendall(frames[i])
            with sent.get_lock():
                sent.value += (hi - lo) * k
        tick += 1
    for c, _ in conns:
        c.close()


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system, every thread) a process has used so far."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(port: int, names: tuple[str, ...]) -> dict[str, float]:
    """The daemon's /metrics samples named ``names`` (unlabelled ones)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            out[name] = float(value)
    return out


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Result:
    store: str
    target: float
    sent: int
    stored: int
    seconds: float
    rate: float
    lag: list[float]
    rss: list[tuple[float, float]]
    dropped: int
    live_lag: list[float]        # the daemon's c4_daemon_live_lag_seconds, sampled
    analysis_mean_s: float       # mean duration of one pass of the live detectors
    cpu: dict[str, float]        # CPU seconds per component over the sending window
    load: list[float]            # 1-minute load average, sampled


def run_store(store: str, args: argparse.Namespace, tmp: Path) -> Result | None:
    from bench.stores import store_url
    from c4.demo.services import start_daemon, start_sidecar
    from c4.processes import free_port, wait_for
    from diagnosis.client import DaemonClient, DaemonError

    found = store_url(store, tmp, "c4_load")
    if found is None:
        print("clickhouse-server not installed: skipping the clickhouse store")
        return None
    url, server = found
    per_car = args.ranks // args.sidecars
    world = per_car * args.sidecars
    k = max(1, round(args.rate * args.frame_interval / world))
    target = world * k / args.frame_interval
    duration = args.minutes * 60
    port, metrics_port = free_port(), free_port()
    daemon = start_daemon(tmp, port, url, extra=("--metrics", f"127.0.0.1:{metrics_port}"))
    cars = [start_sidecar(tmp, port, f"node{i}") for i in range(args.sidecars)]
    ctx = mp.get_context("spawn")
    sent = ctx.Value("q", 0)
    go = ctx.Event()
    drivers, readies = [], []
    for d in range(args.drivers):
        mine = list(range(d, args.sidecars, args.drivers))
        plan = DriverPlan(tuple(str(cars[i][1]) for i in mine), tuple(i * per_car for i in mine),
                          per_car, world, k, args.frame_interval, duration)
        ready = ctx.Event()
        p = ctx.Process(target=_drive, args=(plan, sent, ready, go), daemon=True)
        p.start()
        drivers.append(p)
        readies.append(ready)
    client = DaemonClient(f"127.0.0.1:{port}", timeout=30.0)
    try:
        for r in readies:
            if not r.wait(600):
                raise SystemExit("a load generator did not connect its ranks within 10 min")
        wait_for(lambda: sum(j.ranks_seen for j in client.jobs() if j.job == JOB) >= world,
                 300, interval=1.0, what=f"{world} ranks registered")
        base = client.status().records_ingested
        print(f"{store}: {world:,} ranks on {args.sidecars} sidecars, {k} record(s) per frame "
              f"every {args.frame_interval:g} s, target {target:,.0f} records/s, {duration:.0f} s")
        sends: list[tuple[float, int]] = []
        stores: list[tuple[float, int]] = []
        lag: list[float] = []
        missed = 0
        rss: list[tuple[float, float]] = []
        live_lag: list[float] = []
        load: list[float] = []
        procs = {"generator": [p.pid for p in drivers],
                 "sidecars": [car.proc.pid for car, _ in cars],
                 "daemon": [daemon.proc.pid],
                 "clickhouse": [server.proc.pid] if server is not None else []}

        def cpu_now() -> dict[str, float]:
            return {k: sum(_cpu_s(pid) for pid in pids) for k, pids in procs.items()}

        cpu0 = cpu_now()
        cpu_sent: dict[str, float] | None = None
        t0 = time.monotonic()
        go.set()
        next_poll = next_rss = next_print = t0
        while True:
            now = time.monotonic()
            sends.append((now, sent.value))
            running = any(p.is_alive() for p in drivers)
            if now >= next_poll:
                next_poll = now + args.poll_s
                try:
                    stored = client.status().records_ingested - base
                except DaemonError:   # a busy daemon: count it, try again next time
                    missed += 1
                    stored = None
                if stored is not None:
                    now = time.monotonic()
                    stores.append((now - t0, stored))
                    # the earliest moment the generators had sent ``stored`` records
                    i = np.searchsorted([c for _, c in sends], stored, side="left")
                    if stored > 0 and i < len(sends):
                        lag.append(now - sends[i][0])
                    if not running and stored >= sends[-1][1]:
                        break
                if not running and now - t0 > duration + args.drain_s:
                    break
            if cpu_sent is None and now - t0 >= duration:
                cpu_sent = cpu_now()
            if now >= next_rss:
                next_rss = now + 2.0
                rss.append((now - t0, _rss_mib(daemon.proc.pid)))
                load.append(os.getloadavg()[0])
                if now - t0 <= duration:
                    with contextlib.suppress(OSError, KeyError):
                        live_lag.append(_scrape(metrics_port, ("c4_daemon_live_lag_seconds",))
                                        ["c4_daemon_live_lag_seconds"])
            if now >= next_print and stores:
                next_print = now + 30.0
                print(f"  {now - t0:6.0f} s: sent {sends[-1][1]:,}, stored "
                      f"{stores[-1][1]:,}, daemon RSS {rss[-1][1]:,.0f} MiB")
            time.sleep(0.1)
        if missed:
            print(f"  {missed} status poll(s) of the daemon went unanswered for 30 s")
        # sustained: what was stored while the generators were sending
        window = [(t, n) for t, n in stores if t <= duration] or stores
        elapsed, in_window = window[-1]
        total_sent = sent.value
        status = client.status()
        dropped = sum(s.stats.dropped for s in status.sidecars)
        stored_ops = sum(j.ops for j in client.jobs() if j.job == JOB)
        cpu1 = cpu_sent or cpu_now()
        passes = _scrape(metrics_port, ("c4_daemon_analysis_seconds_sum",
                                        "c4_daemon_analysis_seconds_count"))
        mean_pass = passes.get("c4_daemon_analysis_seconds_sum", 0.0) / \
            max(passes.get("c4_daemon_analysis_seconds_count", 0.0), 1.0)
        return Result(store, target, total_sent, stored_ops, elapsed,
                      in_window / max(elapsed, 1e-9), lag, rss, dropped, live_lag, mean_pass,
                      {k: cpu1[k] - cpu0[k] for k in cpu0}, load)
    finally:
        client.close()
        go.set()
        for p in drivers:
            p.join(30)
            if p.is_alive():
                p.kill()
        for car, _ in cars:
            car.stop()
        daemon.stop()
        if server is not None:
            server.stop()


def _rss_summary(rss: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    values = [m for _, m in rss]
    first = max((m for t, m in rss if t <= 60), default=values[0])
    half = [(t, m) for t, m in rss if t >= rss[-1][0] / 2]
    slope = 0.0
    if len(half) >= 3:
        ts, ms = np.array(half).T
        slope = float(np.polyfit(ts / 60, ms, 1)[0])
    return first, max(values), values[-1], slope


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=16384, help="simulated ranks in the job")
    ap.add_argument("--sidecars", type=int, default=8, help="sidecar processes (nodes)")
    ap.add_argument("--minutes", type=float, default=10.0, help="how long each store runs")
    ap.add_argument("--store", default="memory,sqlite,clickhouse",
                    help="memory, sqlite, clickhouse, or a comma-separated list")
    ap.add_argument("--rate", type=float, default=32768,
                    help="target records per second over all ranks (the generators' pace)")
    ap.add_argument("--frame-interval", type=float, default=2.0,
                    help="seconds between two frames of one rank")
    ap.add_argument("--drivers", type=int, default=2, help="load generator processes")
    ap.add_argument("--poll-s", type=float, default=2.0,
                    help="seconds between two polls of the daemon's stored count (a status "
                         "call: on the memory store it scans every stored row)")
    ap.add_argument("--drain-s", type=float, default=120.0,
                    help="after sending stops, wait at most this long for the daemon to store")
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.ranks + 4096
    if soft < need:   # every simulated rank is a socket at both ends
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    results = []
    for store in args.store.split(","):
        with tempfile.TemporaryDirectory(prefix="c4-load-") as d:
            res = run_store(store.strip(), args, Path(d))
        if res is not None:
            results.append(res)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.ranks:,} ranks on {args.sidecars} sidecars into one daemon, "
                        f"{args.minutes:g} min per store")
    for col in ("store", "target rec/s", "stored rec/s", "sent", "lost", "sidecar drops",
                "lag p50 s", "lag p99 s", "lag max s", "RSS 1st min MiB", "RSS peak MiB",
                "RSS end MiB", "RSS slope 2nd half MiB/min"):
        table.add_column(col, justify="right")
    for r in results:
        lag = sorted(r.lag) or [float("nan")]
        first, peak, last, slope = _rss_summary(r.rss)
        table.add_row(r.store, f"{r.target:,.0f}", f"{r.rate:,.0f}", f"{r.sent:,}",
                      f"{r.sent - r.stored:,}", f"{r.dropped:,}",
                      f"{statistics.median(lag):.2f}", f"{lag[int(0.99 * (len(lag) - 1))]:.2f}",
                      f"{lag[-1]:.2f}", f"{first:,.0f}", f"{peak:,.0f}", f"{last:,.0f}",
                      f"{slope:+.1f}")
    console = Console(width=240)
    console.print(table)
    duration = args.minutes * 60
    more = Table(title="where the time goes: the pipeline's CPU over the sending window, the "
                       "live detectors' lag (c4_daemon_live_lag_seconds), machine load")
    for col in ("store", "sent rec/s", "live lag p50 s", "live lag p99 s", "live lag max s",
                "analysis pass s", "CPU s/1M rec: generator", "sidecars", "daemon",
                "clickhouse", "cores: generator", "sidecars", "daemon", "clickhouse",
                "load avg mean", "load avg max"):
        more.add_column(col, justify="right")
    for r in results:
        live = sorted(r.live_lag) or [float("nan")]
        per_m = {k: v / max(r.sent, 1) * 1e6 for k, v in r.cpu.items()}
        cores = {k: v / duration for k, v in r.cpu.items()}
        parts = ("generator", "sidecars", "daemon", "clickhouse")
        more.add_row(r.store, f"{r.sent / duration:,.0f}", f"{statistics.median(live):.1f}",
                     f"{live[int(0.99 * (len(live) - 1))]:.1f}", f"{live[-1]:.1f}",
                     f"{r.analysis_mean_s:.2f}", *(f"{per_m[k]:.1f}" for k in parts),
                     *(f"{cores[k]:.2f}" for k in parts),
                     f"{statistics.fmean(r.load or [float('nan')]):.1f}",
                     f"{max(r.load or [float('nan')]):.1f}")
    console.print(more)


if __name__ == "__main__":
    main()
