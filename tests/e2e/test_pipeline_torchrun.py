"""The whole telemetry pipeline with real parts: torchrun with 4 gloo ranks as two nodes of
two ranks, a sidecar per node, a daemon process, SQLite. Every call of every rank must be stored
exactly once, with sequence numbers that match across ranks, also when the daemon is killed in
the middle of the run and started again. The two jobs share the daemon and the sidecars."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from diagnosis.client import DaemonClient
from tests.support.services import (
    Service,
    free_port,
    start_daemon,
    start_sidecar,
    torchrun_node,
    wait_for,
)

pytestmark = [pytest.mark.multiprocess, pytest.mark.network, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "mixed_job.py"
P2P = {"send", "recv", "isend", "irecv"}


def _launch(tmp: Path, job: str, node: int, sock: Path, master_port: int, steps: int
            ) -> Service:
    return torchrun_node(tmp, SCRIPT, node=node, nnodes=2, nproc=2, master_port=master_port,
                         sidecar_socket=sock, job=job,
                         env={"C4_TEST_LOG": str(tmp / job), "C4_TEST_STEPS": str(steps)})


def _check_stored(client: DaemonClient, tmp: Path, job: str) -> None:
    expected = {r: json.loads((tmp / job / f"rank{r}.json").read_text()) for r in range(4)}
    cols = client.ops(job)
    names = cols.strings
    rows = list(zip(cols["rank"].tolist(), [names[i] for i in cols["pg"].tolist()],
                    [names[i] for i in cols["op"].tolist()], cols["seq"].tolist(),
                    cols["peer"].tolist(), cols["t_end_ns"].tolist()))
    # exactly once: one row per (rank, pg, op, peer, seq) and as many rows as calls made
    assert len({r[:5] for r in rows}) == len(rows)
    for rank in range(4):
        assert sum(1 for r in rows if r[0] == rank) == sum(expected[rank].values()), rank
        counts = Counter(op for (rk, _pg, op, *_rest) in rows if rk == rank)
        for op in ("all_reduce", "all_gather", "all_gather_into_tensor",
                   "reduce_scatter_tensor", "broadcast", "barrier"):
            want = expected[rank].get(op, 0) + (expected[rank]["pair:all_reduce"]
                                                if op == "all_reduce" else 0)
            assert counts[op] == want, (rank, op, counts[op], want)
    assert all(r[5] > 0 for r in rows), "every call completed"
    # collectives: per group, seq k names the same call on every member, numbered 0..n-1
    by_pg: dict[str, dict[int, dict[int, str]]] = defaultdict(lambda: defaultdict(dict))
    for rank, pg, op, seq, _peer, _t in rows:
        if op not in P2P:
            by_pg[pg][seq][rank] = op
    groups = {g.pg: set(g.ranks) for g in client.groups(job)}
    assert len(by_pg) == 3, f"world group and two pair groups, got {sorted(by_pg)}"
    for pg, calls in by_pg.items():
        assert sorted(calls) == list(range(len(calls))), pg
        for seq, ops in calls.items():
            assert set(ops) == groups[pg], (pg, seq, ops)
            assert len(set(ops.values())) == 1, (pg, seq, ops)
    # point to point: the k-th send a->b matches the k-th receive on b from a
    sends = defaultdict(set)
    recvs = defaultdict(set)
    for rank, pg, op, seq, peer, _t in rows:
        if op in ("send", "isend"):
            sends[(pg, rank, peer)].add(seq)
        elif op in ("recv", "irecv"):
            recvs[(pg, peer, rank)].add(seq)
    assert sends and sends == recvs


@dataclass
class Pipeline:
    """A daemon and a sidecar per node, shared by this module's jobs (each job its own name)."""

    tmp: Path
    port: int
    daemon: Service
    cars: list[tuple[Service, Path]]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Iterator[Pipeline]:
    tmp = tmp_path_factory.mktemp("pipeline")
    port = free_port()
    daemon = start_daemon(tmp, port)
    p = Pipeline(tmp, port, daemon, [])
    try:
        # (sockets sampled five times a second: the 40-step job lasts a few seconds, and a
        # connection needs two samples for a linkstat window even when a loaded machine delays
        # one)
        p.cars = [start_sidecar(tmp, port, f"node{n}", extra=("--link-interval", "0.2"))
                  for n in range(2)]
        yield p
    finally:
        for car, _ in p.cars:
            car.stop()
        p.daemon.stop()


def _run(p: Pipeline, job: str, *, kill_daemon: bool) -> None:
    tmp, port = p.tmp, p.port
    master = free_port()
    steps = 120 if kill_daemon else 40
    procs = [_launch(tmp, job, n, p.cars[n][1], master, steps) for n in range(2)]
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            if kill_daemon:
                wait_for(lambda: any(j.job == job and j.ops > 200 for j in client.jobs()), 120,
                         what="the job's first records")
                p.daemon.kill()
                time.sleep(2.0)
                assert all(pr.running() for pr in procs), "the job should still be running"
                p.daemon = start_daemon(tmp, port, name=f"daemon-restarted-{job}")
            for pr in procs:
                assert pr.proc.wait(300) == 0, pr.output()[-3000:]
            total = sum(sum(json.loads((tmp / job / f"rank{r}.json").read_text()).values())
                        for r in range(4))
            wait_for(lambda: sum(j.ops for j in client.jobs() if j.job == job) >= total, 60,
                     what=f"{total} records")
            time.sleep(1.0)
            _check_stored(client, tmp, job)
            jobs = [j for j in client.jobs() if j.job == job]
            assert sorted(jobs[0].hosts) == ["node0", "node1"] and jobs[0].ranks_seen == 4
        out = subprocess.run([sys.executable, "-m", "c4", "ops", job, "--limit", "0",
                              "--format", "jsonl", "--daemon", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(lines) == total and {rec["type"] for rec in lines} == {"op"}
        trace = tmp / f"{job}.jsonl"
        out = subprocess.run([sys.executable, "-m", "c4", "export", job, "-o", str(trace),
                              "--daemon", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        records = [json.loads(line) for line in trace.read_text().splitlines()]
        kinds = Counter(rec["type"] for rec in records)
        # the sidecars' socket samples come out as the linkstat windows of the ranks'
        # connections (their retransmissions are what shows a lossy link)
        links = [rec for rec in records if rec["type"] == "linkstat"]
        assert links and {rec["src"] for rec in links} | {rec["dst"] for rec in links} \
            <= set(range(4))
        assert kinds == {"meta": 1, "rank": 4, "group": 3, "op": total, "end": 1,
                         "linkstat": len(links)}
    finally:
        for pr in procs:
            pr.kill()


def test_every_call_stored_once(pipeline):
    _run(pipeline, "mixed", kill_daemon=False)


def test_daemon_killed_mid_run(pipeline):
    _run(pipeline, "mixed-kill", kill_daemon=True)
