"""The sidecar delivers every record exactly once across daemon crashes (real processes, real
gRPC, real Unix sockets; the ranks are a driver that speaks the collector wire)."""

from __future__ import annotations

import time

import pytest

from diagnosis.client import DaemonClient
from tests.support.frames import RankConnection, group_info, op_batch, rank_info
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

pytestmark = [pytest.mark.network]


def _stored(client: DaemonClient, job: str) -> list[tuple[int, int]]:
    cols = client.ops(job)
    return sorted(zip(cols["rank"].tolist(), cols["seq"].tolist()))


def test_records_arrive_once_through_two_sidecars(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car_a, sock_a = start_sidecar(tmp_path, port, "node0")
    car_b, sock_b = start_sidecar(tmp_path, port, "node1")
    try:
        conns = []
        for rank, sock in enumerate([sock_a, sock_a, sock_b, sock_b]):
            c = RankConnection(sock)
            c.send(rank_info("j1", rank, 4, "node0" if rank < 2 else "node1"),
                   group_info("j1", "0", [0, 1, 2, 3]))
            c.send(*(op_batch("j1", rank, range(i, i + 100)) for i in range(0, 1000, 100)))
            conns.append(c)
        with DaemonClient(f"127.0.0.1:{port}") as client:
            want = sorted((r, s) for r in range(4) for s in range(1000))
            wait_for(lambda: _stored(client, "j1") == want, 30, what="4,000 records")
            jobs = client.jobs()
            assert [(j.job, j.ranks_seen, j.world_size, j.ops) for j in jobs] == \
                [("j1", 4, 4, 4000)]
            assert sorted(jobs[0].hosts) == ["node0", "node1"]
            assert [(r.rank, r.host) for r in client.ranks("j1")] == \
                [(0, "node0"), (1, "node0"), (2, "node1"), (3, "node1")]
            status = wait_for(lambda: (s := client.status()) and len(s.sidecars) == 2 and s,
                              20, what="both sidecars in status")
            assert {s.host for s in status.sidecars} == {"node0", "node1"}
        for c in conns:
            c.close()
        assert daemon.stop() == 0, "SIGTERM: a clean exit after storing what was acknowledged"
        assert car_a.stop() == 0 and car_b.stop() == 0
    finally:
        car_a.stop()
        car_b.stop()
        daemon.stop()


def test_daemon_killed_mid_run_loses_and_duplicates_nothing(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car, sock = start_sidecar(tmp_path, port, "node0")
    try:
        rank = RankConnection(sock)
        rank.send(rank_info("j2", 0, 1, "node0"), group_info("j2", "0", [0]))
        for i in range(0, 3000, 100):
            rank.send(op_batch("j2", 0, range(i, i + 100)))
            time.sleep(0.01)
        daemon.kill()  # SIGKILL: no chance to flush anything
        for i in range(3000, 6000, 100):  # the sidecar must hold these until a daemon returns
            rank.send(op_batch("j2", 0, range(i, i + 100)))
        # the sidecar saw the daemon go; it holds the records for as long as the new daemon
        # takes to start (seconds), and it must not lose them meanwhile
        wait_for(lambda: "daemon stream broke" in car.output(), 10,
                 what="the sidecar to notice the daemon is gone")
        daemon = start_daemon(tmp_path, port, name="daemon2")
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: client.jobs() and client.jobs()[0].ops >= 6000, 60,
                     what="all 6,000 records after the restart")
            time.sleep(1.0)  # let any late resend arrive: it must not be stored twice
            stored = _stored(client, "j2")
            assert stored == [(0, s) for s in range(6000)]
        rank.close()
    finally:
        car.stop()
        daemon.stop()


def test_open_call_is_replaced_by_its_completion(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car, sock = start_sidecar(tmp_path, port, "node0")
    try:
        rank = RankConnection(sock)
        rank.send(rank_info("j3", 0, 1, "node0"), op_batch("j3", 0, range(0, 5), t_end=False))
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: len(client.ops("j3")) == 5, 20, what="open records")
            assert (client.ops("j3")["t_end_ns"] == -1).all()
            rank.send(op_batch("j3", 0, range(0, 5)))
            wait_for(lambda: (client.ops("j3")["t_end_ns"] > 0).all(), 20,
                     what="completed records")
            assert len(client.ops("j3")) == 5
        rank.close()
    finally:
        car.stop()
        daemon.stop()


def test_sidecar_started_before_the_daemon_and_restarted_keeps_everything(tmp_path):
    """No daemon at all at first: records wait in the sidecar's log; the sidecar itself is
    stopped (it takes what the rank had written first) and a new one started on the same log;
    when a daemon finally appears, everything arrives once."""
    port = free_port()
    car, sock = start_sidecar(tmp_path, port, "node0")
    rank = RankConnection(sock)
    rank.send(rank_info("j4", 0, 1, "node0"))
    rank.send(*(op_batch("j4", 0, range(i, i + 50)) for i in range(0, 1000, 50)))
    rank.close()
    assert car.stop() == 0
    spill = tmp_path / "sidecar-node0-spill"
    assert any(spill.glob("*.c4wal")), "the sidecar should have logged the records"
    car, sock = start_sidecar(tmp_path, port, "node0")
    daemon = start_daemon(tmp_path, port)
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: _stored(client, "j4") == [(0, s) for s in range(1000)], 60,
                     what="the spilled records")
        wait_for(lambda: sum(p.stat().st_size for p in spill.glob("*.c4wal")) < 4096, 20,
                 what="the log to empty")
    finally:
        car.stop()
        daemon.stop()
