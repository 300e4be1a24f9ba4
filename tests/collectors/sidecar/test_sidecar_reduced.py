"""Reduced telemetry end to end with real processes (a daemon, a sidecar, real gRPC and Unix
sockets; the ranks are paced drivers of the collector wire): the daemon's budget makes the job
sample its calls, every rank switches at the announced call so sampled calls stay complete, the
records leaving the node drop by about K, progress and port records arrive (a fake sysfs port
goes down), a stopped rank is reported from progress, and the full records around the report
come back from the node's ring."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from c4.proto.codec import decode_ops, decode_ports, decode_progress
from c4.proto.sampling import is_sampled
from diagnosis.client import DaemonClient
from tests.support.paced import PacedJob
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

pytestmark = [pytest.mark.network]

RATE = 400          # calls per second per communicator and rank
PGS = ("0", "1")
RANKS = 4


def _sysfs(root: Path) -> Path:
    base = root / "class" / "net" / "eth0"
    (base / "statistics").mkdir(parents=True)
    (base / "operstate").write_text("up\n")
    for c in ("rx_bytes", "tx_bytes", "rx_errors", "tx_dropped", "rx_crc_errors"):
        (base / "statistics" / c).write_text("0\n")
    return root


def _schedule(client: DaemonClient, job: str):
    scheds = [c.schedule for c in client.reduced(job) if c.WhichOneof("body") == "schedule"]
    return scheds[-1] if scheds else None


def test_budget_sampling_progress_ports_hang_and_detail(tmp_path):
    sysfs = _sysfs(tmp_path / "sys")
    port = free_port()
    daemon = start_daemon(tmp_path, port, extra=["--job-records-per-s", "1500",
                                                 "--analyze-interval", "0.5",
                                                 "--calls-per-rank", "0"])
    car, sock = start_sidecar(tmp_path, port, "node0",
                              extra=["--sysfs-root", str(sysfs), "--nic-map", "eth0=node0/nic0"])
    job = PacedJob(sock, "big", ranks=RANKS, host="node0", pgs=PGS, rate=RATE).start()
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            sched = wait_for(lambda: _schedule(client, "big"), 30,
                             what="a sampling schedule for the job")
            steps = {s.pg: (s.from_seq, s.sample) for s in sched.steps}
            assert set(steps) == set(PGS)
            k = steps["0"][1]
            assert k == 4, steps     # 3,200 calls/s into ~1,500/s: K = 4
            switch = max(s for s, _ in steps.values())
            # run well past the switch, then let a port go down and a rank stop
            wait_for(lambda: min(job.sent) > switch + 3 * RATE, 40, what="calls past the switch")
            (sysfs / "class/net/eth0/operstate").write_text("down\n")
            blocked = job.hang(3)
            report = wait_for(lambda: [r for r in client.faults("big")
                                       if any(s.rank == 3 or s.id == "3" for s in r.suspects)],
                              40, what="a report naming the stopped rank")[0]
            assert report.kind.endswith("hang"), report
            details = wait_for(lambda: client.details("big", report.id), 30,
                               what="the full records around the report")
            ops = client.ops("big")
            chunks = client.reduced("big")
            status = client.status()
        assert job.error is None
        _check_switch(ops, steps, blocked)
        _check_volume(ops, steps, k)
        progress = [decode_progress(c.progress) for c in chunks if c.WhichOneof("body") ==
                    "progress"]
        assert progress and max(int(p["entered"].max()) for p in progress) >= blocked - 1
        ports = [decode_ports(c.ports) for c in chunks if c.WhichOneof("body") == "ports"]
        states = [(p.strings[n], int(u)) for p in ports for n, u in zip(p["nic"], p["up"])]
        assert ("node0/nic0", 1) in states and ("node0/nic0", 0) in states
        # detail: every call of every rank around the onset, sampled or not
        full = [decode_ops(d.ops) for d in details if d.ops.count]
        assert full and details[0].host == "node0"
        seqs = {int(q) for d in full for q in d["seq"].tolist()}
        assert any(not is_sampled("0", q, k) for q in seqs), "unsampled calls came back"
        (sc,) = status.sidecars
        assert sc.stats.records_out > 0 and sc.stats.late_steps == 0
        _check_export(tmp_path, port, k, len(ops), sum(len(d) for d in full))
    finally:
        job.close()
        car.stop()
        daemon.stop()


def _check_switch(ops, steps: dict, blocked: int) -> None:
    """Before S every call of every rank; from S on exactly the sampled calls, each with every
    rank: all ranks switched at the same call."""
    names = np.asarray(ops.strings, dtype=object)
    members: dict[tuple[str, int], set[int]] = defaultdict(set)
    for pg, seq, rank in zip(names[ops["pg"]].tolist(), ops["seq"].tolist(),
                             ops["rank"].tolist(), strict=True):
        members[(pg, seq)].add(rank)
    for pg, (start, k) in steps.items():
        seqs = sorted(s for p, s in members if p == pg and s < blocked)
        assert [s for s in seqs if s < start] == list(range(start)), "every call before S"
        after = [s for s in seqs if s >= start]
        want = [s for s in range(start, blocked) if is_sampled(pg, s, k)]
        assert after == want, f"{pg}: from seq {start} on only the calls sampled at K={k}"
        incomplete = [s for s in seqs if members[(pg, s)] != set(range(RANKS))]
        assert not incomplete, f"{pg}: calls missing a rank: {incomplete[:5]}"


def _check_volume(ops, steps: dict, k: int) -> None:
    start = max(s for s, _ in steps.values())
    seq = ops["seq"]
    before = int((seq < start).sum()) / start
    top = int(seq.max())
    after = int((seq >= start).sum()) / max(top - start, 1)
    assert 0.6 / k < after / before < 1.6 / k, (before, after, k)


def _export(tmp_path: Path, port: int, *flags: str) -> list[dict]:
    out = tmp_path / f"export{'-'.join(flags)}.jsonl"
    done = subprocess.run([sys.executable, "-m", "c4", "export", "big", "-o", str(out), *flags,
                           "--daemon", f"127.0.0.1:{port}"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _check_export(tmp_path: Path, port: int, k: int, stored: int, detail: int) -> None:
    """A version 2 trace: the job's factor, its calls thinned to it, its progress and port
    records; with --full also the calls pulled around the report."""
    lines = _export(tmp_path, port)
    kinds = Counter(rec["type"] for rec in lines)
    assert lines[0] == {"type": "meta", "version": 2, "job": "big", "sample": k}
    assert kinds["rank"] == RANKS and kinds["group"] == len(PGS) and kinds["end"] == 1
    assert kinds["progress"] > 0 and kinds["port"] >= 2 and "linkstat" not in kinds
    ops = [rec for rec in lines if rec["type"] == "op"]
    assert all(is_sampled(rec["pg"], rec["seq"], k) or rec.get("status", "ok") != "ok"
               or "t_end_ns" not in rec for rec in ops)
    assert len(ops) < stored
    full = [rec for rec in _export(tmp_path, port, "--full") if rec["type"] == "op"]
    assert len(ops) < len(full) <= len(ops) + detail
    keys = [(r["rank"], r["pg"], r["op"], r["seq"]) for r in full]
    assert len(keys) == len(set(keys)), "one line per call"
    trace = tmp_path / "export--full.jsonl"
    done = subprocess.run([sys.executable, "-m", "c4", "analyze", str(trace)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
