"""One job's bad data never blinds the detectors to another's fault (issue 16, items 4 and 5):
a poison batch, a huge communicator or a batch of a million names is refused at the door with
a message naming the bound, and a planted hang in another job is still reported within 5 s;
behind the door, a failure in one job's analysis stays in that job."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from bench.chaos.planted import huge_group, hung_job, numbered, poison_ops
from c4.proto import c4_pb2
from c4.proto.codec import decode_ops, encode_ops
from c4.security.channel import ClientSecurity
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.frames import op_batch, rank_info
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]
REPORT_WITHIN_S = 5.0


@pytest.fixture
def daemon():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", analyze_interval_s=0.2,
                            max_requests_per_second=0))
    d.start()
    c = DaemonClient(f"127.0.0.1:{d.port}", timeout=10.0, security=ClientSecurity())
    try:
        yield d, c
    finally:
        c.close()
        d.stop(grace=1)


def _plant_hang(c: DaemonClient, job: str, first_seq: int) -> float:
    """Send a hung job; returns when its last request was acknowledged."""
    for req in numbered("planter", first_seq, hung_job(job, time.time_ns())):
        assert not c.send(req).code
    return time.monotonic()


def _reported_within(c: DaemonClient, job: str, since: float) -> float:
    wait_for(lambda: c.faults(job), REPORT_WITHIN_S + 5, interval=0.1,
             what=f"a fault report for {job}")
    took = time.monotonic() - since
    assert took <= REPORT_WITHIN_S, f"the hang in {job} took {took:.1f} s to be reported"
    return took


def test_poison_batch_refused_and_the_other_jobs_hang_reported(daemon):
    d, c = daemon
    assert not c.send(numbered("poisoner", 1, [rank_info("job-a", 0, 1, "n9")])[0]).code
    with pytest.raises(DaemonError) as info:
        c.send(numbered("poisoner", 2, [poison_ops("job-a")])[0])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'t_enter_ns'" in str(info.value) and "2**62" in str(info.value)
    with pytest.raises(DaemonError) as info:          # 1970: far behind the daemon's clock
        c.send(numbered("poisoner", 3, [op_batch("job-a", 0, range(4), t0=10**9)])[0])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "since the epoch" in str(info.value)
    assert "--max-record-age" in str(info.value)
    since = _plant_hang(c, "job-b", 1)
    _reported_within(c, "job-b", since)
    assert not c.faults("job-a")
    assert d.status().job_problems == 0


def test_a_failure_inside_one_jobs_analysis_leaves_the_others_alone(daemon):
    """Past the door: job A's detectors fail on every call (a fault planted in its engine), in
    the same group commits and analysis passes as job B's records; B's hang is reported."""
    d, c = daemon
    for req in numbered("a", 1, [rank_info("job-a", 0, 1, "n9"),
                                 c4_pb2.IngestRequest(group=c4_pb2.GroupInfo(
                                     job="job-a", pg="0", ranks=[0]))]):
        assert not c.send(req).code
    wait_for(lambda: d.live._jobs.get(("job-a", 0)) is not None
             and d.live._jobs[("job-a", 0)].engine is not None, 5, what="job A's engine")
    engine = d.live._jobs[("job-a", 0)].engine

    def broken(*args, **kwargs):
        raise OverflowError("planted: job A's analysis fails")

    engine.add_ops = engine.advance = broken
    assert not c.send(numbered("a", 3, [op_batch("job-a", 0, range(8))])[0]).code
    since = _plant_hang(c, "job-b", 1)
    _reported_within(c, "job-b", since)
    assert not c.faults("job-a")
    problems = d.live.problems
    assert problems.get("apply", 0) >= 1 and problems.get("advance", 0) >= 1, problems
    assert d.status().job_problems == sum(problems.values())


def test_huge_group_and_a_million_names_refused_saying_which_bound(daemon):
    _, c = daemon
    assert not c.send(numbered("big", 1, [rank_info("job-a", 0, 4, "n9")])[0]).code
    with pytest.raises(DaemonError) as info:           # 5 MB: 1,048,575 ranks
        c.send(numbered("big", 2, [huge_group("job-a")])[0])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max-ranks" in str(info.value)
    names = c4_pb2.IngestRequest(ops=encode_ops("job-a", _named_ops(1_000_000)))
    with pytest.raises(DaemonError) as info:
        c.send(numbered("big", 3, [names])[0])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max-names" in str(info.value) and "1,000,00" in str(info.value)
    since = _plant_hang(c, "job-b", 1)
    _reported_within(c, "job-b", since)


def _named_ops(n_names: int):
    """Four op records whose batch carries ``n_names`` distinct communicator names."""
    cols = decode_ops(op_batch("job-a", 0, range(4)).ops)
    cols.strings[:] = [*cols.strings, *(f"pg-{i}" for i in range(n_names - len(cols.strings)))]
    return cols


def test_one_jobs_memory_is_bounded_and_accounted():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            max_requests_per_second=0))
    try:
        from diagnosis.daemon.jobs import JobLimits

        d.jobs.limits = JobLimits(job_memory_bytes=64 << 20)
        d.start()
        c = DaemonClient(f"127.0.0.1:{d.port}", timeout=10.0, security=ClientSecurity())
        assert not c.send(numbered("m", 1, [rank_info("wide", 0, 131_072, "n0")])[0]).code
        small = d.jobs.job_bytes("wide")
        assert 8 << 20 < small < 64 << 20, small          # 64 B per rank id, and the job
        with pytest.raises(DaemonError) as info:          # 131,072 members: ~320 MiB
            c.send(numbered("m", 2, [huge_group("wide", 131_072)])[0])
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "--job-memory" in str(info.value)
        assert d.jobs.job_bytes("wide") == small, "a refused registration adds nothing"
        assert d.jobs.live_bytes() == small
        c.close()
    finally:
        d.stop(grace=1)


def test_a_jobs_name_tables_are_bounded(daemon):
    """Batches of fresh names (each under --max-names) fill one job's name tables up to the
    bound; past it the job's records are stored but no longer analysed, the others are."""
    d, c = daemon
    d.live.max_job_names = 500
    assert not c.send(numbered("n", 1, [rank_info("job-a", 0, 1, "n9")])[0]).code
    assert not c.send(numbered("n", 2, [c4_pb2.IngestRequest(group=c4_pb2.GroupInfo(
        job="job-a", pg="0", ranks=[0]))])[0]).code
    for i in range(4):       # 300 rows, each on a communicator of a name never seen
        src = decode_ops(op_batch("job-a", 0, range(i * 300, i * 300 + 300)).ops)
        cols = type(src)({k: v.copy() for k, v in src.columns.items()},
                         [*src.strings, *(f"pg-{i}-{k}" for k in range(300))])
        cols.columns["pg"][:] = np.arange(len(src.strings), len(src.strings) + 300)
        req = c4_pb2.IngestRequest(ops=encode_ops("job-a", cols))
        assert not c.send(numbered("n", 3 + i, [req])[0]).code
    wait_for(lambda: d.live.problems.get("names", 0) >= 1, 5, what="the name bound reached")
    engine = d.live._jobs[("job-a", 0)].engine
    assert len(engine.pg_names) + len(engine.op_names) <= 500 + 310
    assert len(c.ops("job-a")) == 1200, "every record stored"
    since = _plant_hang(c, "job-b", 1)
    _reported_within(c, "job-b", since)
