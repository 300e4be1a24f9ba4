"""Job limits on a real daemon (issue 16, item 3): a job over --max-jobs is parked on its own
while the sidecar's other jobs flow; the limit counts live jobs; retention ages jobs out;
`c4 jobs rm` removes one."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.security.channel import ClientSecurity
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.spill import Spill
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.admin import Retention
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.jobs import JobBook, JobLimits
from diagnosis.daemon.server import Daemon
from diagnosis.store import RankRecord
from tests.support.clickhouse import clickhouse_server, clickhouse_url  # noqa: F401
from tests.support.frames import op_batch, rank_info
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]


def _daemon(store: str = "memory://", **config) -> tuple[Daemon, DaemonClient]:
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store=store, max_requests_per_second=0,
                            **config))
    d.start()
    return d, DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())


def _ops(c: DaemonClient, job: str) -> int:
    return next((j.ops for j in c.jobs() if j.job == job), 0)


def test_a_parked_job_waits_while_the_sidecars_other_job_flows(tmp_path):
    """Job B is one job too many: its requests wait in the sidecar, job A's (queued after B's)
    all arrive; once A is removed, B is taken on its own, nothing rejected or lost."""
    d, c = _daemon(jobs=JobLimits(max_jobs=1))
    outbox = Outbox("both", Spill(tmp_path / "spill", 1 << 26), memory_max_bytes=1 << 26,
                    max_inflight=16, security=ClientSecurity())
    stop = threading.Event()
    runner = threading.Thread(target=outbox.run, args=(f"127.0.0.1:{d.port}", stop),
                              kwargs={"reconnect_max_s": 0.5}, daemon=True)
    try:
        outbox.put(rank=rank_info("job-a", 0, 1, "node0").rank)
        outbox.put(rank=rank_info("job-b", 0, 1, "node0").rank)   # over --max-jobs
        outbox.put(ops=op_batch("job-b", 0, range(0, 100)).ops)
        for i in range(50):                                       # behind B's, in order
            outbox.put(ops=op_batch("job-a", 0, range(i * 100, i * 100 + 100)).ops)
        outbox.put(ops=op_batch("job-b", 0, range(100, 200)).ops)
        runner.start()
        wait_for(lambda: _ops(c, "job-a") == 5000, 30, what="job A's 5,000 records")
        parked = outbox.parked_jobs()
        assert parked == {"job-b": 3}, parked
        assert [j.job for j in c.jobs()] == ["job-a"]
        assert d.status().live_jobs == 1

        r = c.remove_job("job-a")
        assert (r.job, r.attempts) == ("job-a", 1)
        wait_for(lambda: _ops(c, "job-b") == 200, 30, what="job B taken once A was removed")
        wait_for(outbox.idle, 10, what="every request acknowledged")
        assert outbox.stats.rejected == 0 and outbox.drops.records() == {}
        assert outbox.stats.parked >= 3 and outbox.stats.throttled == 0
        assert sorted(c.ops("job-b")["seq"].tolist()) == list(range(200))
        assert [j.job for j in c.jobs()] == ["job-b"]
    finally:
        stop.set()
        runner.join(10)
        c.close()
        d.stop(grace=1)


def test_the_job_limit_counts_live_jobs_only():
    now = [10**18]
    book = JobBook(JobLimits(max_jobs=1, idle_s=60), clock=lambda: now[0])
    book.admit(RankRecord(job="a", attempt=0, rank=0, world_size=1, host="n"))
    with pytest.raises(Exception) as info:
        book.admit(RankRecord(job="b", attempt=0, rank=0, world_size=1, host="n"))
    assert info.value.parked_job == "b" and "--max-jobs" in info.value.message
    now[0] += 61 * 10**9                       # a is silent past --job-idle: no longer live
    book.admit(RankRecord(job="b", attempt=0, rank=0, world_size=1, host="n"))
    assert (book.known(), book.live()) == (2, 1)

    # after a restart: jobs last written long ago do not count, a recent one does
    again = JobBook(JobLimits(max_jobs=1, idle_s=60), clock=lambda: now[0])
    again.load({f"old-{i}": now[0] - 3600 * 10**9 for i in range(10_000)})
    again.admit(RankRecord(job="new", attempt=0, rank=0, world_size=1, host="n"))
    assert again.live() == 1
    recent = JobBook(JobLimits(max_jobs=1, idle_s=60), clock=lambda: now[0])
    recent.load({"busy": now[0] - 10**9})
    with pytest.raises(Exception) as info:
        recent.admit(RankRecord(job="new", attempt=0, rank=0, world_size=1, host="n"))
    assert info.value.parked_job == "new"


def test_retention_ages_old_jobs_out_of_a_sqlite_store(tmp_path):
    d, c = _daemon(store=f"sqlite:///{tmp_path / 'c4.db'}")
    try:
        for seq, job in enumerate(("old", "kept"), 1):
            assert not c.send(_numbered(rank_info(job, 0, 1, "n0"), 2 * seq - 1)).code
            assert not c.send(_numbered(op_batch(job, 0, range(10)), 2 * seq)).code
            time.sleep(0.05)   # "kept" is written to after "old"
        assert sorted(j.job for j in c.jobs()) == ["kept", "old"]
        seen = d.store.job_seen()
        assert seen["kept"] > seen["old"] + 10**6
        hour = 3600 * 10**9
        retention = Retention(d.store, d.remover, retention_s=3600.0,
                              clock=lambda: seen["old"] + hour - 1)
        assert retention.sweep()[0] == []               # not yet: inside the retention
        retention._clock = lambda: seen["old"] + hour + 10**6
        removed, _ = retention.sweep()
        assert removed == ["old"]
        assert [j.job for j in c.jobs()] == ["kept"]
        # the door forgot it: its records are refused until a rank registers again
        with pytest.raises(DaemonError) as info:
            c.send(_numbered(op_batch("old", 0, range(10, 20)), 10))
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        assert "removed, or aged out" in str(info.value)
    finally:
        c.close()
        d.stop(grace=1)


def test_jobs_rm_on_the_command_line(tmp_path):
    d, c = _daemon(store=f"sqlite:///{tmp_path / 'c4.db'}")
    try:
        assert not c.send(_numbered(rank_info("done", 0, 1, "n0"), 1)).code
        assert not c.send(_numbered(op_batch("done", 0, range(10)), 2)).code
        address = f"127.0.0.1:{d.port}"
        out = CliRunner().invoke(build_app(), ["jobs", "rm", "done", "--daemon", address])
        assert out.exit_code == 0, out.output
        assert "removed job done: 1 attempt(s)" in out.output
        assert c.jobs() == []
        out = CliRunner().invoke(build_app(), ["jobs", "rm", "done", "--daemon", address])
        assert out.exit_code == 0 and "not stored" in out.output
        out = CliRunner().invoke(build_app(), ["jobs", "--daemon", address, "--format", "json"])
        assert out.exit_code == 0 and json.loads(out.output) == {"jobs": []}
    finally:
        c.close()
        d.stop(grace=1)


def _numbered(req, seq: int, sidecar: str = "s"):
    req.sidecar, req.seq = sidecar, seq
    return req


def test_jobs_rm_on_clickhouse(clickhouse_url):  # noqa: F811
    d, c = _daemon(store=clickhouse_url)
    try:
        for seq, job in enumerate(("gone", "stays"), 1):
            assert not c.send(_numbered(rank_info(job, 0, 1, "n0"), 2 * seq - 1)).code
            assert not c.send(_numbered(op_batch(job, 0, range(10)), 2 * seq)).code
        wait_for(lambda: len(c.jobs()) == 2, 20, what="both jobs stored")
        r = c.remove_job("gone")
        assert (r.job, r.attempts) == ("gone", 1)
        assert [j.job for j in c.jobs()] == ["stays"]
        assert len(c.ops("stays")) == 10
    finally:
        c.close()
        d.stop(grace=1)



def test_requests_without_a_job_are_never_parked():
    from c4.proto import c4_pb2
    from collectors.sidecar.outbox import _job_of

    assert _job_of(c4_pb2.IngestRequest(host_topology=c4_pb2.HostTopology(host="n0"))) == ""
    assert _job_of(c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="n0"))) == ""
    assert _job_of(rank_info("j", 0, 1, "n0")) == "j"
