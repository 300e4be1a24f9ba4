"""Sidecars behind a relay: every record stored once, through one stream to the daemon, even
when the relay is killed mid-run (real processes, real gRPC; the ranks are a driver that speaks
the collector wire)."""

from __future__ import annotations

import time

import pytest

from c4.processes import Service, c4_command
from diagnosis.client import DaemonClient
from tests.support.frames import RankConnection, group_info, op_batch, rank_info
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

pytestmark = [pytest.mark.network]


def start_relay(workdir, port: int, daemon_port: int, name: str = "relay") -> Service:
    svc = Service(c4_command("relay", "--listen", f"127.0.0.1:{port}", "--daemon",
                             f"127.0.0.1:{daemon_port}", "--upstreams", "1"),
                  workdir / f"{name}.log").start()
    wait_for(lambda: "c4 relay listening" in svc.output(), 60, what="the relay to listen")
    return svc


def _stored(client: DaemonClient, job: str) -> list[tuple[int, int]]:
    cols = client.ops(job)
    return sorted(zip(cols["rank"].tolist(), cols["seq"].tolist()))


def test_sidecars_behind_a_relay_deliver_everything_over_one_stream(tmp_path):
    dport, rport = free_port(), free_port()
    daemon = start_daemon(tmp_path, dport)
    relay = start_relay(tmp_path, rport, dport)
    cars = [start_sidecar(tmp_path, rport, f"node{i}") for i in range(3)]
    try:
        conns = []
        for rank in range(6):
            c = RankConnection(cars[rank // 2][1])
            c.send(rank_info("j1", rank, 6, f"node{rank // 2}"),
                   group_info("j1", "0", list(range(6))))
            c.send(*(op_batch("j1", rank, range(i, i + 100)) for i in range(0, 1000, 100)))
            conns.append(c)
        with DaemonClient(f"127.0.0.1:{dport}") as client:
            want = sorted((r, s) for r in range(6) for s in range(1000))
            wait_for(lambda: _stored(client, "j1") == want, 30, what="6,000 records")
            assert [(r.rank, r.host) for r in client.ranks("j1")] == \
                [(r, f"node{r // 2}") for r in range(6)]
            status = wait_for(lambda: (s := client.status()) and len(s.sidecars) == 3 and s,
                              20, what="the three sidecars in the daemon's status")
            assert {s.host for s in status.sidecars} == {"node0", "node1", "node2"}
            assert status.ingest_streams == 1   # the relay's, not one per sidecar
        for c in conns:
            c.close()
    finally:
        for svc, _ in cars:
            svc.stop()
        relay.stop()
        daemon.stop()


def test_a_relay_killed_mid_run_loses_and_duplicates_nothing(tmp_path):
    dport, rport = free_port(), free_port()
    daemon = start_daemon(tmp_path, dport)
    relay = start_relay(tmp_path, rport, dport)
    (car_a, sock_a), (car_b, sock_b) = (start_sidecar(tmp_path, rport, f"node{i}")
                                        for i in range(2))
    try:
        ranks = [RankConnection(sock) for sock in (sock_a, sock_b)]
        for rank, c in enumerate(ranks):
            c.send(rank_info("j2", rank, 2, f"node{rank}"), group_info("j2", "0", [0, 1]))
        for i in range(0, 3000, 100):
            for rank, c in enumerate(ranks):
                c.send(op_batch("j2", rank, range(i, i + 100)))
            time.sleep(0.01)
        relay.kill()  # SIGKILL: requests in its queues die with it, unacknowledged
        for i in range(3000, 6000, 100):
            for rank, c in enumerate(ranks):
                c.send(op_batch("j2", rank, range(i, i + 100)))
        wait_for(lambda: "daemon stream broke" in car_a.output(), 10,
                 what="the sidecar to notice the relay is gone")
        relay = start_relay(tmp_path, rport, dport, name="relay2")
        with DaemonClient(f"127.0.0.1:{dport}") as client:
            want = sorted((r, s) for r in range(2) for s in range(6000))
            wait_for(lambda: _stored(client, "j2") == want, 60,
                     what="all 12,000 records after the relay's restart")
            time.sleep(1.0)  # a late resend must not be stored twice
            assert _stored(client, "j2") == want
            assert [j.ops for j in client.jobs()] == [12000]
    finally:
        car_a.stop()
        car_b.stop()
        relay.stop()
        daemon.stop()
