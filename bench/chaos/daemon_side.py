"""Daemon-side chaos: attacks sent straight to a real ``c4 daemon`` process (SQLite store), each
next to a job with a planted hang, timed from the hang's last request to its fault report.
What each attack got back, how long the other job's hang took to be reported, how long a
``c4 status`` took meanwhile, and the daemon's peak resident size."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.chaos.cluster import _proc_field
from bench.chaos.planted import huge_group, hung_job, numbered, poison_ops
from c4.demo.services import start_daemon
from c4.processes import Service, free_port
from c4.proto import c4_pb2, c4_pb2_grpc
from c4.proto.codec import decode_ops, encode_ops
from c4.security.channel import ClientSecurity, open_channel
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.spill import Spill
from diagnosis.client import DaemonClient, DaemonError

REPORT_TIMEOUT_S = 60.0


@dataclass
class DaemonRow:
    scenario: str
    answer: str                 # what the attack got back
    report_s: float | None      # the other job's hang: seconds to its report (None: never)
    status_ms: float            # one `c4 status` during the attack
    daemon_mib: float
    notes: list[str] = field(default_factory=list)


class _Daemon:
    def __init__(self, workdir: Path, extra: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.channels: list[grpc.Channel] = []   # attackers' channels, closed at the end
        self.port = free_port()
        self.svc: Service = start_daemon(workdir, self.port, extra=("--analyze-interval", "0.5",
                                                                    *extra))
        self.address = f"127.0.0.1:{self.port}"
        self.client = DaemonClient(self.address, timeout=60.0, security=ClientSecurity())

    @property
    def peak_mib(self) -> float:
        assert self.svc.proc is not None
        return _proc_field(self.svc.proc.pid, "VmHWM:")

    def status_ms(self) -> float:
        t0 = time.perf_counter()
        self.client.status()
        return (time.perf_counter() - t0) * 1e3

    def send(self, reqs: list[c4_pb2.IngestRequest]) -> str:
        """Send in order; the first refusal's status and message, or "accepted"."""
        for req in reqs:
            try:
                ack = self.client.send(req)
            except DaemonError as exc:
                return f"{exc.code.name if exc.code else 'error'}: {_short(str(exc))}"
            if ack.code:
                return f"code {ack.code}: {_short(ack.error)}"
        return "accepted"

    def hang_reported_after(self, job: str) -> float | None:
        """Plant a hang in ``job``; seconds from its last request to its fault report."""
        reqs = numbered(f"planter-{job}", 1, hung_job(job, time.time_ns()))
        outcome = self.send(reqs)
        if outcome != "accepted":
            raise RuntimeError(f"the planted hang was refused: {outcome}")
        t0 = time.monotonic()
        while time.monotonic() - t0 < REPORT_TIMEOUT_S:
            if self.client.faults(job):
                return time.monotonic() - t0
            time.sleep(0.05)
        return None

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        self.client.close()
        self.svc.stop()


def _short(text: str, limit: int = 110) -> str:
    text = text.split(" says: ", 1)[-1]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _with_daemon(workdir: Path, name: str, attack: Callable[[_Daemon], tuple[str, list[str]]],
                 extra: tuple[str, ...] = ()) -> DaemonRow:
    d = _Daemon(workdir, extra)
    try:
        answer, notes = attack(d)
        status_ms = d.status_ms()
        report = d.hang_reported_after("job-b")
        return DaemonRow(name, answer, report, status_ms, d.peak_mib, notes)
    finally:
        d.close()


def hang_alone(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "a planted hang alone", lambda d: ("-", []))


def _poison(d: _Daemon) -> tuple[str, list[str]]:
    reg = numbered("poisoner", 1, [c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job="job-a", rank=0, world_size=1, host="n9"))])
    d.send(reg)
    answer = d.send(numbered("poisoner", 2, [poison_ops("job-a")]))
    stale = poison_ops("job-a")
    cols = decode_ops(stale.ops)
    cols = type(cols)({k: v.copy() for k, v in cols.columns.items()}, cols.strings)
    cols.columns["t_enter_ns"][:] = 10**9          # 1970
    cols.columns["t_end_ns"][:] = 10**9 + 1000
    late = d.send(numbered("poisoner", 3, [c4_pb2.IngestRequest(ops=encode_ops("job-a",
                                                                                 cols))]))
    return answer, [f"1970 times: {late}"]


def poison_next_to_hang(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "int64-extreme batch in job A, hang in job B", _poison)


def _huge_group(d: _Daemon) -> tuple[str, list[str]]:
    d.send(numbered("big", 1, [c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job="job-a", rank=0, world_size=4, host="n9"))]))
    before = d.peak_mib
    answer = d.send(numbered("big", 2, [huge_group("job-a")]))
    return answer, [f"peak {before:,.0f} MiB before it, {d.peak_mib:,.0f} after"]


def huge_group_next_to_hang(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "GroupInfo of 1,048,575 ranks (5 MB) in job A", _huge_group)


def _million_names(d: _Daemon) -> tuple[str, list[str]]:
    d.send(numbered("names", 1, [c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job="job-a", rank=0, world_size=1, host="n9"))]))
    req = poison_ops("job-a")
    cols = decode_ops(req.ops)
    cols = type(cols)({k: v.copy() for k, v in cols.columns.items()},
                      [*cols.strings, *(f"pg-{i}" for i in range(1_000_000))])
    cols.columns["t_enter_ns"][:] = time.time_ns()
    cols.columns["t_end_ns"][:] = time.time_ns()
    t0 = time.perf_counter()
    answer = d.send(numbered("names", 2, [c4_pb2.IngestRequest(ops=encode_ops("job-a", cols))]))
    return answer, [f"answered in {time.perf_counter() - t0:.2f} s"]


def million_names_next_to_hang(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "batch of 1,000,000 names in job A", _million_names)


def _watches(d: _Daemon, n: int = 520) -> tuple[str, list[str]]:
    channel = open_channel(d.address, ClientSecurity())
    stub = c4_pb2_grpc.FaultsStub(channel)
    calls, refused, lock = [], [], threading.Lock()

    def watch() -> None:
        call = stub.Watch(c4_pb2.WatchFaultsRequest())
        with lock:
            calls.append(call)
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                with lock:
                    refused.append(exc.details())

    threads = [threading.Thread(target=watch, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(refused) + d.client.status().watches < n:
        time.sleep(0.2)
    held = d.client.status().watches
    d.channels.append(channel)   # the watches stay open through the planted hang
    return (f"{held} held, {len(refused)} RESOURCE_EXHAUSTED",
            [f"{n} watches opened; ingest and status served beside them"])


def watches_next_to_hang(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "520 fault watches", _watches)


def _random_bytes(d: _Daemon, n: int = 200) -> tuple[str, list[str]]:
    channel = grpc.insecure_channel(d.address)
    send = channel.unary_unary("/c4.v1.Ingest/Send")
    codes: dict[str, int] = {}
    for _ in range(n):
        try:
            send(os.urandom(256) + b"\xff" * 8, timeout=10)
            codes["OK"] = codes.get("OK", 0) + 1
        except grpc.RpcError as exc:
            codes[exc.code().name] = codes.get(exc.code().name, 0) + 1
    channel.close()
    time.sleep(0.5)
    log_lines = sum("refused" in line for line in d.svc.output().splitlines())
    return (", ".join(f"{k} x{v}" for k, v in sorted(codes.items())),
            [f"{n} requests of random bytes; {log_lines} log lines about refusals"])


def random_bytes_next_to_hang(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "200 requests of random bytes", _random_bytes)


def _over_max_jobs(d: _Daemon, records: int = 50_000) -> tuple[str, list[str]]:
    """One sidecar outbox (the real one) carrying job C, over --max-jobs, ahead of job A."""
    # a job already live fills --max-jobs 2 with job A: job C is one too many
    d.send(numbered("filler", 1, [c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job="job-x", rank=0, world_size=1, host="n0"))]))
    spill = Spill(d.workdir / "outbox-spill", 1 << 28)
    outbox = Outbox("both", spill, memory_max_bytes=1 << 28, max_inflight=64,
                    security=ClientSecurity())
    rank = c4_pb2.RankInfo
    outbox.put(rank=rank(job="job-a", rank=0, world_size=1, host="n0"))
    outbox.put(rank=rank(job="job-c", rank=0, world_size=1, host="n0"))
    per = 500
    for i in range(records // per):
        outbox.put(ops=encode_ops("job-a", _clean_ops(per, i * per)))
    stop = threading.Event()
    runner = threading.Thread(target=outbox.run, args=(d.address, stop), daemon=True)
    t0 = time.monotonic()
    runner.start()
    stored = 0
    while time.monotonic() - t0 < 60:
        stored = next((j.ops for j in d.client.jobs() if j.job == "job-a"), 0)
        if stored == records:
            break
        time.sleep(0.2)
    took = time.monotonic() - t0
    parked = outbox.parked_jobs()
    stop.set()
    runner.join(10)
    d.client.remove_job("job-x")     # room for the planted hang's job
    return (f"job C parked ({parked.get('job-c', 0)} requests held back)",
            [f"job A: {stored:,} of {records:,} records stored in {took:.1f} s while C waited"])


def _clean_ops(n: int, first_seq: int):
    import numpy as np

    from c4.proto.codec import Columns

    seq = np.arange(first_seq, first_seq + n, dtype=np.int64)
    t = time.time_ns() - 10**9 + seq
    return Columns({
        "rank": np.zeros(n, np.int32), "pg": np.zeros(n, np.uint32), "seq": seq,
        "op": np.full(n, 2, np.uint32), "nbytes": np.full(n, 4096, np.int64),
        "dtype": np.ones(n, np.uint32), "t_enter_ns": t, "t_start_ns": np.full(n, -1, np.int64),
        "t_end_ns": t + 100, "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32),
    }, ["0", "float32", "all_reduce"])


def over_max_jobs_next_to_hang(workdir: Path) -> DaemonRow:
    return _with_daemon(workdir, "job over --max-jobs on a sidecar carrying job A",
                        _over_max_jobs, extra=("--max-jobs", "2"))


DAEMON_SCENARIOS: dict[str, Callable[[Path], DaemonRow]] = {
    "hang-alone": hang_alone,
    "poison": poison_next_to_hang,
    "huge-group": huge_group_next_to_hang,
    "million-names": million_names_next_to_hang,
    "watches": watches_next_to_hang,
    "random-bytes": random_bytes_next_to_hang,
    "max-jobs": over_max_jobs_next_to_hang,
}
