"""One daemon, a whole large job: the reduced stream of a 16,384- or 131,072-rank job at 400
calls/s per rank into one `c4 daemon` on this machine.

    python -m bench.scale.job [--ranks 16384] [--minutes 10] [--store sqlite|clickhouse]
                              [--streams 16] [--budget 200000] [--fault-at-s S]
                              [--fabric rail|tor|three_tier|...] [--relays R]

``bench.scale.jobgen`` builds, second by second, what the job's sidecars ship in reduced mode
(sampled op rows, progress and linkstat per window, port records, the collectors' counters),
following the daemon's schedule as sidecars do: the factor it starts the job with (from its
size), per-communicator steps, longer windows. ``--streams`` gRPC ingest streams carry it
(each stands for the sidecars of ``nodes / streams`` nodes, with the outbox's window of 64
requests in flight). One rank stops at ``--fault-at-s`` (default: two minutes before the end):
the daemon must report it. With ``--fabric`` the daemon localizes on that fabric (built for
the job's nodes, 8 GPUs each, GPU i on rail i), as a daemon given the cluster's topology does:
the connections' paths, the index of what each crosses, the peers' load model. With
``--relays R`` the streams go to R ``c4 relay`` processes (round robin), which carry them to the
daemon over ``--relay-upstreams`` streams each: with ``--streams`` at one per node, the tier
that lets one daemon take more sidecars than its 480 stream threads.

Printed: the schedule the daemon chose; per minute the records acknowledged per second by
kind, the ingest lag (request made -> acknowledged once stored: the time it waited in the
stream's outbox counts, as it would in a sidecar's) p50/p99, the detectors' lag
(``c4_daemon_live_lag_seconds``) p99, the daemon's RSS and CPU; then records lost (sent minus
acknowledged, and the job's op rows stored against those sent), requests rejected, and the
time from the planted stop to the report that names the rank.

Each stream holds at most ``OUTBOX`` requests: when the daemon pushes back, the generator
waits and falls behind its pace (printed), as sidecars would spill to their logs. The bench stops
the daemon and exits, saying so, once the daemon's RSS passes ``--max-daemon-rss-gib``.

One machine plays the whole cluster: the generator's CPU competes with the daemon's (both are
printed). Ranks register once each (RankInfo), groups once each (real sidecars forward every
rank's groups); the daemon runs with no per-sender request limit (every stream comes from this
one address).
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import os
import queue
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from bench.scale.jobgen import NS, JobGen, JobShape, encode
from c4.proto import c4_pb2, c4_pb2_grpc
from c4.topology.fabrics import FABRICS

INFLIGHT = 64
# requests a stream holds before the generator waits: a sidecar's outbox keeps a bounded number
# in memory (a real one spills the rest to its write-ahead log); here the generator falls
# behind its pace instead, which the table reports
OUTBOX = 4 * INFLIGHT
# rows per request (a sidecar's batches are far smaller: one node's records)
BATCH_ROWS = 20_000
TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except OSError:
        return 0.0


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Counts:
    sent: collections.Counter = field(default_factory=collections.Counter)
    acked: collections.Counter = field(default_factory=collections.Counter)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    lat: list[tuple[float, float]] = field(default_factory=list)   # (ack time, latency)
    # (ack time, latency from the request's send): the part of ``lat`` on the wire and in
    # the daemon, without the wait in the outbox
    wire: list[tuple[float, float]] = field(default_factory=list)
    # records acknowledged per kind and second (monotonic, whole seconds)
    per_s: collections.Counter = field(default_factory=collections.Counter)


class Stream:
    """One ingest stream playing many sidecars: ordered requests, at most INFLIGHT unacked."""

    def __init__(self, address: str, name: str, counts: Counts, lock: threading.Lock,
                 on_control) -> None:
        self.name = name
        self._counts, self._lock = counts, lock
        self._on_control = on_control
        # (when made, the request)
        self._queue: queue.Queue[tuple[float, c4_pb2.IngestRequest] | None] = queue.Queue(OUTBOX)
        # seq -> (when made, when sent, kind, records)
        self._inflight: dict[int, tuple[float, float, str, int]] = {}
        self._room = threading.Semaphore(INFLIGHT)
        self._seq = 0
        self._channel = grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20)])
        self._stub = c4_pb2_grpc.IngestStub(self._channel)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def put(self, records: int, **body: object) -> None:
        self._seq += 1
        self._queue.put((time.monotonic(),
                         c4_pb2.IngestRequest(sidecar=self.name, seq=self._seq, **body)))
        with self._lock:
            self._counts.sent[next(iter(body))] += records

    def pending(self) -> int:
        return self._queue.qsize() + len(self._inflight)

    def _requests(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            made, req = item
            self._room.acquire()
            kind = req.WhichOneof("body")
            body = getattr(req, kind)
            n = body.count if hasattr(body, "count") else sum(
                c.count for c in body.collector_columns) if kind == "stats" else 1
            self._inflight[req.seq] = (made, time.monotonic(), kind, n)
            yield req

    def _run(self) -> None:
        try:
            for ack in self._stub.Stream(self._requests()):
                if ack.HasField("control"):
                    self._on_control(ack.control)
                    continue
                sent = self._inflight.pop(ack.seq, None)
                if sent is None:
                    continue
                self._room.release()
                now = time.monotonic()
                with self._lock:
                    if ack.code:
                        self._counts.rejected += 1
                        if len(self._counts.errors) < 5:
                            self._counts.errors.append(ack.error)
                    else:
                        self._counts.acked[sent[2]] += sent[3]
                        self._counts.per_s[(sent[2], int(now))] += sent[3]
                        self._counts.lat.append((now, now - sent[0]))
                        self._counts.wire.append((now, now - sent[1]))
        except grpc.RpcError as exc:
            with self._lock:
                self._counts.errors.append(f"{self.name}: {exc.code()} {exc.details()}")

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=5)
        self._room.release()          # a request waiting for room goes, then the end
        self._thread.join(5)
        self._channel.close()         # whatever is still unacknowledged is counted lost


def _slices(cols, rows: int):
    """``cols`` in batches of at most ``rows`` rows, each with only the names it uses: a real
    sidecar ships one node's records, whose table is small; one stream here stands for
    hundreds of nodes, whose names together pass the daemon's per-batch limit."""
    from c4.proto.codec import OPTIONAL_STRING_COLUMNS, STRING_COLUMNS, Columns

    table = np.asarray(cols.strings, dtype=object)
    for a in range(0, len(cols), rows):
        part = {k: v[a:a + rows] for k, v in cols.columns.items()}
        named = [k for k in part if k in STRING_COLUMNS and len(table)]
        used = np.unique(np.concatenate([part[k][part[k] >= 0] for k in named])
                         ).astype(np.int64) if named else np.zeros(0, np.int64)
        remap = np.full(len(table), -1, np.int64)
        remap[used] = np.arange(len(used))
        for k in named:
            col = part[k]
            part[k] = np.where(col >= 0, remap[np.maximum(col, 0)], -1).astype(col.dtype) \
                if k in OPTIONAL_STRING_COLUMNS else remap[col].astype(col.dtype)
        yield Columns(part, table[used].tolist())


def _metric(url: str, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _gc(url: str) -> dict[str, float]:
    """The daemon's time in Python's garbage collector: total (every generation) and the
    longest collection, in s; objects frozen."""
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return {}
    out = {"total": 0.0, "longest": 0.0, "frozen": 0.0}
    for line in text.splitlines():
        name, _, v = line.rpartition(" ")
        if name.startswith("c4_daemon_gc_seconds_total{"):
            out["total"] += float(v)
        elif name == "c4_daemon_gc_longest_pause_seconds":
            out["longest"] = float(v)
        elif name == "c4_daemon_gc_frozen_objects":
            out["frozen"] = float(v)
    return out


def _guard(daemon, limit_gib: float) -> None:
    """Stop the daemon and the bench once the daemon holds ``limit_gib``: the generator may
    be blocked on a stream the daemon no longer drains, so this watches from its own thread."""
    t0 = time.monotonic()

    def watch() -> None:
        while daemon.proc.poll() is None:
            rss = _rss_mib(daemon.proc.pid)
            if rss > limit_gib * 1024:
                print(f"RUN STOPPED after {time.monotonic() - t0:.0f} s (registration "
                      f"included): the daemon's RSS reached {rss:,.0f} MiB "
                      f"(--max-daemon-rss-gib {limit_gib:g})", flush=True)
                daemon.stop()
                os._exit(3)
            time.sleep(1)

    threading.Thread(target=watch, daemon=True).start()


def run(args: argparse.Namespace, work: Path) -> dict:
    from c4.demo.services import start_daemon
    from c4.processes import free_port
    from diagnosis.client import DaemonClient

    shape = JobShape(ranks=args.ranks, streams=args.streams)
    port, mport = free_port(), free_port()
    store = args.store_url
    topology: list[str] = []
    if args.fabric:
        from c4.topology.fabrics import build_fabric

        build_fabric(args.fabric, shape.nodes, shape.per_node).save(work / "fabric.json")
        topology = ["--topology", str(work / "fabric.json")]
    daemon = start_daemon(work, port, store=store, extra=[
        "--job-records-per-s", str(args.budget), "--max-requests-per-second", "0",
        "--metrics", str(mport), "--analyze-interval", "1", *topology])
    # stopped however the bench ends (main turns SIGTERM into an exit): a daemon left behind
    # holds gigabytes at this size
    atexit.register(daemon.stop)
    _guard(daemon, args.max_daemon_rss_gib)
    address = f"127.0.0.1:{port}"
    relays = _start_relays(args, work, address)
    entries = [f"127.0.0.1:{p}" for _, p in relays] or [address]
    counts, lock = Counts(), threading.Lock()
    gen = JobGen(shape, time.time_ns() + int(60 * NS))   # t0 set when the calls start
    schedules: list[tuple[float, c4_pb2.SampleSchedule]] = []

    def on_control(ctl: c4_pb2.Control) -> None:
        if ctl.WhichOneof("body") == "schedule":
            with lock:
                if gen.sampling.apply(ctl.schedule):
                    schedules.append((time.monotonic(), ctl.schedule))

    streams = [Stream(entries[i % len(entries)], f"gen{i}", counts, lock, on_control)
               for i in range(shape.streams)]
    reports: list[tuple[float, object]] = []
    watcher_stop = threading.Event()

    def watch() -> None:
        with DaemonClient(address, timeout=5) as c, contextlib.suppress(Exception):
            for r in c.watch(shape.job):
                reports.append((time.monotonic(), r))
                if watcher_stop.is_set():
                    return

    threading.Thread(target=watch, daemon=True).start()
    t_reg = time.monotonic()
    for i, st in enumerate(streams):
        for info in gen.rank_infos(i):
            st.put(1, rank=info)
    for j, g in enumerate(gen.groups()):
        streams[j % len(streams)].put(1, group=g)
    while sum(s.pending() for s in streams) and time.monotonic() - t_reg < 600:
        time.sleep(0.2)
    registered_s = time.monotonic() - t_reg
    deadline = time.monotonic() + 15
    while not schedules and time.monotonic() < deadline:
        time.sleep(0.1)
    gen.t0 = time.time_ns()
    t_start = time.monotonic()
    end = t_start + args.minutes * 60
    fault_at = t_start + (args.fault_at_s if args.fault_at_s is not None
                          else max(30.0, args.minutes * 60 - 120))
    fault = None
    samples: list[dict] = []
    next_sample = t_start
    d0, g0 = _cpu(daemon.proc.pid), time.process_time()
    r0 = sum(_cpu(r.proc.pid) for r, _ in relays)
    sec = 0
    window_next = None
    port_next = t_start
    behind = 0.0
    while time.monotonic() < end:
        target = t_start + sec + 1
        now = time.monotonic()
        if now < target:
            time.sleep(target - now)
        else:
            behind = max(behind, now - target)
        lo, hi = gen.t0 + sec * NS, gen.t0 + (sec + 1) * NS
        if fault is None and time.monotonic() >= fault_at:
            fault = gen.plant(rank=shape.ranks // 2 + 3, t_ns=hi - NS // 2)
            fault_mono = time.monotonic() - 0.5
        with lock:
            parts = gen.ops(lo, hi)
        for st, cols in zip(streams, parts, strict=True):
            if cols is not None:
                for chunk in _slices(cols, BATCH_ROWS):
                    st.put(len(chunk), ops=encode("ops", shape.job, chunk))
        # windows end on the shared clock; shipped once the sidecars' watermark passes
        w = gen.sampling.window_ns or NS
        if gen.sampling.window_from_ns and hi < gen.sampling.window_from_ns:
            w = NS
        if window_next is None:
            window_next = (gen.t0 // w + 1) * w
        while window_next + int(shape.lag_s * NS) <= hi:
            for i, st in enumerate(streams):
                p = gen.progress(i, window_next)
                for chunk in _slices(p, BATCH_ROWS) if p is not None else ():
                    st.put(len(chunk), progress=encode("progress", shape.job, chunk))
                ls = gen.linkstat(i, window_next, w)
                for chunk in _slices(ls, BATCH_ROWS) if ls is not None else ():
                    st.put(len(chunk), linkstats=encode("linkstats", shape.job, chunk))
            window_next += w
        if time.monotonic() >= port_next:
            for i, st in enumerate(streams):
                pc = gen.ports(i, hi)
                st.put(len(pc), ports=encode("ports", shape.job, pc))
            port_next += 30
        for i, st in enumerate(streams):
            st.put(0, stats=gen.stats(i, hi))
        sec += 1
        if time.monotonic() >= next_sample:
            next_sample += 5
            samples.append({"t": time.monotonic() - t_start, "rss": _rss_mib(daemon.proc.pid),
                            "lag": _metric(f"http://127.0.0.1:{mport}/metrics",
                                           "c4_daemon_live_lag_seconds"),
                            "dcpu": _cpu(daemon.proc.pid), "gcpu": time.process_time()})
    sending = time.monotonic() - t_start
    d1, g1 = _cpu(daemon.proc.pid), time.process_time()
    r1 = sum(_cpu(r.proc.pid) for r, _ in relays)
    relay_rss = [_rss_mib(r.proc.pid) for r, _ in relays]
    drain = time.monotonic()
    while sum(s.pending() for s in streams) and time.monotonic() - drain < 300:
        time.sleep(0.2)
    drained_s = time.monotonic() - drain
    time.sleep(2)
    watcher_stop.set()
    for st in streams:
        st.close()
    with DaemonClient(address, timeout=60) as c:
        stored_ops = sum(j.ops for j in c.jobs() if j.job == shape.job)
        faults = c.faults(shape.job)
        daemon_streams = c.status().ingest_streams
    for r, _ in relays:
        r.stop()
    gc_s = _gc(f"http://127.0.0.1:{mport}/metrics")
    daemon.stop()
    found = [(t, r) for t, r in reports if fault is not None and r.state == "open" and
             any(s.rank == fault.rank or s.id == str(fault.rank) for s in r.suspects)]
    return {"shape": shape, "counts": counts, "samples": samples, "sending": sending,
            "registered_s": registered_s, "drained_s": drained_s, "behind": behind,
            "stored_ops": stored_ops, "schedules": schedules, "t_start": t_start,
            "fault": fault, "fault_latency": (found[0][0] - fault_mono) if found else None,
            "report": found[0][1] if found else None, "faults": faults,
            "others": _others(reports, fault), "gc": gc_s,
            "daemon_cpu": (d1 - d0) / sending, "gen_cpu": (g1 - g0) / sending,
            "relays": len(relays), "relay_cpu": (r1 - r0) / sending, "relay_rss": relay_rss,
            "daemon_streams": daemon_streams}


def _start_relays(args: argparse.Namespace, work: Path, daemon: str) -> list[tuple[Any, int]]:
    """``--relays`` relay processes in front of the daemon: (service, port) each."""
    from c4.processes import Service, c4_command, free_port, wait_for

    per = -(-args.streams // args.relays) if args.relays else 0
    relays = []
    for i in range(args.relays):
        port = free_port()
        svc = Service(c4_command("relay", "--listen", f"127.0.0.1:{port}", "--daemon", daemon,
                                 "--upstreams", str(args.relay_upstreams),
                                 "--max-streams", str(per + 8), "--workers", str(per + 16)),
                      work / f"relay{i}.log").start()
        atexit.register(svc.stop)
        wait_for(lambda svc=svc: "c4 relay listening" in svc.output(), 60,
                 what=f"relay {i} to listen")
        relays.append((svc, port))
    return relays


def _others(reports: list[tuple[float, object]], fault) -> dict[str, tuple[str, str]]:
    """Every report the watcher saw that does not name the planted rank (false alarms, also
    those later withdrawn): id -> (kind, summary) of its last version."""
    out: dict[str, tuple[str, str]] = {}
    for _, r in reports:
        if fault is None or not any(s.rank == fault.rank or s.id == str(fault.rank)
                                    for s in r.suspects):
            out[r.id] = (r.kind, r.summary)
    return out


def _print(args: argparse.Namespace, res: dict) -> None:
    shape, counts = res["shape"], res["counts"]
    print(f"\none daemon, a whole job: {shape.ranks:,} ranks x {shape.calls_per_rank:g} calls/s "
          f"({shape.ranks * shape.calls_per_rank / 1e6:.2f}M calls/s), store {args.store}, "
          f"fabric {args.fabric or 'none'}, "
          f"budget {args.budget:,.0f} records/s, {shape.streams} streams, "
          f"{res['sending'] / 60:.1f} min")
    print(f"registration of {shape.ranks:,} ranks and their groups: {res['registered_s']:.1f} s;"
          f" the generator at most {res['behind']:.2f} s behind its pace")
    for t, s in res["schedules"]:
        steps = {st.sample for st in s.steps}
        print(f"  schedule at {t - res['t_start']:+.0f} s: default K={s.default_sample or 1}, "
              f"steps K={sorted(steps) or '-'} on {len({st.pg for st in s.steps})} groups, "
              f"window {s.window_ns / 1e9 if s.window_ns else 1:g} s")
    lat = counts.lat
    t0 = res["t_start"]
    print("\nminute | ops/s | progress/s | linkstat/s | ingest lag p50/p99 s | detector lag p99 s"
          " | daemon RSS MiB | daemon CPU % | generator CPU %")
    print("--- | --- | --- | --- | --- | --- | --- | --- | ---")
    samples = res["samples"]
    minutes = max(1, int(res["sending"] // 60))
    for m in range(minutes):
        lo, hi = t0 + 60 * m, t0 + 60 * (m + 1)
        ls = sorted(x for t, x in lat if lo <= t < hi) or [0.0]
        sm = [s for s in samples if 60 * m <= s["t"] < 60 * (m + 1)]
        lags = sorted(s["lag"] for s in sm if s["lag"] is not None) or [0.0]
        rss = sm[-1]["rss"] if sm else 0
        cpu_d = cpu_g = 0.0
        if len(sm) > 1:
            dt = sm[-1]["t"] - sm[0]["t"]
            cpu_d = 100 * (sm[-1]["dcpu"] - sm[0]["dcpu"]) / dt
            cpu_g = 100 * (sm[-1]["gcpu"] - sm[0]["gcpu"]) / dt
        print(f"{m + 1} | {_rate(counts, 'ops', lo, hi):,.0f} | "
              f"{_rate(counts, 'progress', lo, hi):,.0f} | "
              f"{_rate(counts, 'linkstats', lo, hi):,.0f} | "
              f"{ls[len(ls) // 2]:.2f} / {ls[int(0.99 * (len(ls) - 1))]:.2f} | "
              f"{lags[int(0.99 * (len(lags) - 1))]:.2f} | {rss:,.0f} | {cpu_d:.0f} | {cpu_g:.0f}")
    print("\nover time (every 30 s): t s | RSS MiB | detector lag s | ingest lag p99 s")
    for s in samples[::6]:
        near = sorted(x for t, x in lat if t0 + s["t"] - 30 <= t < t0 + s["t"]) or [0.0]
        print(f"  {s['t']:5.0f} | {s['rss']:7,.0f} | {s['lag'] or 0:6.2f} | "
              f"{near[int(0.99 * (len(near) - 1))]:6.2f}")
    rss = [s["rss"] for s in samples]
    half = [s for s in samples if s["t"] >= res["sending"] / 2]
    slope = 0.0
    if len(half) > 2:
        xs = [s["t"] / 60 for s in half]
        ys = [s["rss"] for s in half]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / \
            max(sum((x - mx) ** 2 for x in xs), 1e-9)
    all_lat = sorted(x for _, x in lat) or [0.0]
    lags = sorted(s["lag"] for s in samples if s["lag"] is not None) or [0.0]
    sent, acked = counts.sent, counts.acked
    lost = {k: sent[k] - acked[k] for k in sent if k != "stats"}
    print(f"\nsustained: {sum(acked[k] for k in acked if k != 'stats') / res['sending']:,.0f} "
          f"records/s acknowledged ({', '.join(f'{k} {acked[k]:,}' for k in sorted(acked))})")
    wire = sorted(x for _, x in counts.wire) or [0.0]
    print(f"ingest lag p99 {all_lat[int(0.99 * (len(all_lat) - 1))]:.2f} s, max "
          f"{all_lat[-1]:.2f} s (from the send, outbox wait left out: p99 "
          f"{wire[int(0.99 * (len(wire) - 1))]:.2f} s); detector lag p99 "
          f"{lags[int(0.99 * (len(lags) - 1))]:.2f} s, "
          f"max {lags[-1]:.2f} s; drained {res['drained_s']:.1f} s after sending stopped")
    print(f"daemon RSS: first minute {rss[min(11, len(rss) - 1)] if rss else 0:,.0f} MiB, peak "
          f"{max(rss) if rss else 0:,.0f}, last {rss[-1] if rss else 0:,.0f}; slope over the "
          f"second half {slope:+.1f} MiB/min")
    print(f"daemon CPU {100 * res['daemon_cpu']:.0f}% of a core, generator "
          f"{100 * res['gen_cpu']:.0f}%")
    if res["relays"]:
        rps = len(lat) / res["sending"]
        print(f"relays: {res['relays']}, each carrying {shape.streams / res['relays']:.0f} "
              f"streams to the daemon over {args.relay_upstreams}; {rps:,.0f} requests/s "
              f"relayed; CPU {100 * res['relay_cpu']:.0f}% of a core in all "
              f"({1e3 * res['relay_cpu'] / max(rps, 1):.2f} ms a request); RSS "
              f"{', '.join(f'{r:,.0f}' for r in res['relay_rss'])} MiB; the daemon held "
              f"{res['daemon_streams']} ingest streams")
    if res["gc"]:
        g = res["gc"]
        print(f"daemon in Python's garbage collector: {g['total']:.1f} s in all, longest "
              f"{g['longest']:.2f} s; {g['frozen']:,.0f} objects frozen at the end")
    print(f"records lost: {lost} (sent minus acknowledged); op rows stored "
          f"{res['stored_ops']:,} of {sent['ops']:,} sent; requests rejected {counts.rejected}"
          + (f" ({counts.errors[:3]})" if counts.errors else ""))
    f = res["fault"]
    if f is None:
        print("no fault planted (the run was too short)")
    elif res["report"] is None:
        print(f"planted: rank {f.rank} stops; NOT reported ({len(res['faults'])} reports: "
              f"{[(r.kind, r.summary[:60]) for r in res['faults'][:3]]})")
    else:
        r = res["report"]
        print(f"planted: rank {f.rank} stops; reported after {res['fault_latency']:.1f} s as "
              f"{r.kind}: {r.summary}")
        # where the time went: in the job's own time (how long its data had to show the
        # hang), the rest on the way (generator, ingest and detector lags)
        ev = r.evidence or {}
        print(f"  its evidence: first seen {(r.first_seen_ns - f.t_ns) / NS:+.1f} s of job time "
              f"after the stop, hang bound {ev.get('bound_ms', '?')} ms, stuck calls "
              f"{ev.get('stuck_calls', [])[:2]}")
    others = res["others"]
    kinds = collections.Counter(k for k, _ in others.values())
    print(f"other reports (not naming the planted rank, withdrawn ones included): {len(others)}"
          + (f" {dict(kinds)}; e.g. {next(iter(others.values()))[1][:160]}" if others else ""))


def _rate(counts: Counts, kind: str, lo: float, hi: float) -> float:
    """Records of ``kind`` acknowledged per second between ``lo`` and ``hi`` (monotonic)."""
    total = sum(n for (k, sec), n in counts.per_s.items() if k == kind and lo <= sec < hi)
    return total / max(hi - lo, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--store", choices=("memory", "sqlite", "clickhouse"), default="sqlite",
                    help="clickhouse: a private server (see bench.stores)")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--budget", type=float, default=200_000.0)
    ap.add_argument("--fault-at-s", type=float, default=None)
    ap.add_argument("--fabric", choices=FABRICS, default=None,
                    help="give the daemon this fabric's topology (default: none)")
    ap.add_argument("--relays", type=int, default=0,
                    help="send through this many `c4 relay` processes (default: straight in)")
    ap.add_argument("--relay-upstreams", type=int, default=4,
                    help="streams from each relay to the daemon")
    ap.add_argument("--max-daemon-rss-gib", type=float, default=12.0,
                    help="stop the run (and say so) once the daemon holds this much")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from bench.stores import store_url

    with tempfile.TemporaryDirectory(prefix="c4-scale-") as tmp:
        work = Path(tmp)
        found = store_url(args.store, work, "c4_scale")
        if found is None:
            raise SystemExit("clickhouse-server is not installed (scripts/system-deps.sh)")
        args.store_url, server = found
        try:
            res = run(args, work)
        finally:
            if server is not None:
                server.stop()
    _print(args, res)


if __name__ == "__main__":
    main()
