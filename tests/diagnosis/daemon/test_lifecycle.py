"""A job whose ranks all exit has ended: `c4 jobs` says finished or failed, and its open
faults resolve with the reason (a recovery started later must not act on them)."""

from __future__ import annotations

import time

import pytest

from c4.proto import c4_pb2
from c4.report import FaultReport, Suspect
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.jobs import JobLimits
from diagnosis.daemon.server import Daemon
from tests.support.frames import group_info, op_batch, rank_info
from tests.support.services import free_port, wait_for

pytestmark = [pytest.mark.network]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://",
                            analyze_interval_s=0.2))
    d.start()
    yield d
    d.stop(grace=0.5)


def _run_job(client: DaemonClient, job: str, seq0: int) -> None:
    for rank in (0, 1):
        client.send(_req(seq0 + rank, rank_info(job, rank, 2, f"n{rank}")))
        client.send(_req(seq0 + 2 + rank, op_batch(job, rank, range(20))))


def _req(seq: int, body: c4_pb2.IngestRequest) -> c4_pb2.IngestRequest:
    body.sidecar = "lifecycle"
    body.seq = seq
    return body


def _exit(client: DaemonClient, job: str, seq: int, ranks=(0, 1)) -> None:
    stats = c4_pb2.SidecarStats(host="n0", collectors=[
        c4_pb2.CollectorStats(job=job, rank=r, t_ns=time.time_ns(), leaving=True)
        for r in ranks])
    client.send(_req(seq, c4_pb2.IngestRequest(stats=stats)))


def _job(client: DaemonClient, job: str) -> c4_pb2.JobSummary:
    return next(j for j in client.jobs() if j.job == job)


@pytest.mark.parametrize(("job", "kind", "state"), [
    ("ends-well", "noncomm_slow", "finished"),
    ("ends-hung", "noncomm_hang", "failed"),
])
def test_ended_job_resolves_its_faults_with_the_reason(daemon, job, kind, state):
    seq0 = 100 if state == "finished" else 200
    with DaemonClient(f"127.0.0.1:{daemon.port}") as client:
        _run_job(client, job, seq0)
        wait_for(lambda: _job(client, job).state == "running", 10, what="the job running")
        fault = daemon.hub.file(job, FaultReport(
            kind=kind, suspects=(Suspect("rank", "1", 0.9, rank=1),), first_seen_ns=1,
            summary="rank 1", evidence={"culprits": [1]}, id=f"{kind}:1"))
        _exit(client, job, seq0 + 10, ranks=(0,))
        time.sleep(0.6)                                   # a pass with one rank still there
        assert _job(client, job).state == "running"
        assert daemon.store.get_fault(fault.id).state == "open"
        _exit(client, job, seq0 + 11, ranks=(1,))
        summary = wait_for(lambda: (j := _job(client, job)).state == state and j, 10,
                           what=f"the job {state}")
        assert summary.ended_ns > 0 and "every rank exited" in summary.end_reason
        resolved = client.fault(fault.id)
        assert resolved.state == "resolved"
        reason = resolved.evidence["resolution"]["reason"]
        assert reason.startswith(f"job {job} {state}") and "every rank exited" in reason
        assert not client.faults(job, open_only=True)


def test_killed_job_without_last_words_fails_and_its_faults_resolve():
    """Every process SIGKILLed: no rank says it is exiting, the job just goes quiet. After the
    daemon's bounded silence (``JobLimits.gone_after_s``) the job has failed, and its open
    faults resolve with the reason; a recovery started later finds nothing to act on."""
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://",
                            analyze_interval_s=0.2, jobs=JobLimits(gone_after_s=1.5)))
    d.start()
    try:
        with DaemonClient(f"127.0.0.1:{d.port}") as client:
            _run_job(client, "killed", 300)
            wait_for(lambda: _job(client, "killed").state == "running", 10,
                     what="the job running")
            fault = d.hub.file("killed", FaultReport(
                kind="noncomm_slow", suspects=(Suspect("rank", "1", 0.9, rank=1),),
                first_seen_ns=1, summary="rank 1 is slow", id="noncomm_slow:rank:1"))
            t0 = time.monotonic()
            # the detectors go on revising it while the silence is not yet long enough
            time.sleep(1.0)
            d.hub.file("killed", FaultReport(
                kind="noncomm_slow", suspects=(Suspect("rank", "1", 0.9, rank=1),),
                first_seen_ns=1, last_seen_ns=time.time_ns(), summary="rank 1 is slow",
                id="noncomm_slow:rank:1"))
            summary = wait_for(lambda: (j := _job(client, "killed")).state == "failed" and j,
                               15, what="the silent job failed")
            assert time.monotonic() - t0 >= 1.0       # not before the silence is long enough
            assert summary.ended_ns > 0
            assert "no rank said it was exiting" in summary.end_reason
            resolved = client.fault(fault.id)
            assert resolved.state == "resolved"
            reason = resolved.evidence["resolution"]["reason"]
            assert reason.startswith("job killed failed") and "nothing heard" in reason
            # it ran no longer than its job: its end is when the job was last heard
            assert 1 <= resolved.last_seen_ns <= summary.ended_ns
            assert not client.faults("killed", open_only=True)
            # it speaks again (a partition healed, not a kill): it runs again
            client.send(_req(310, op_batch("killed", 0, range(20, 30))))
            wait_for(lambda: _job(client, "killed").state == "running", 10,
                     what="the job running again")
    finally:
        d.stop(grace=0.5)


def test_a_killed_jobs_hang_is_not_revised_after_its_end():
    """Rank 1 stops, rank 0 waits in call 200, then every process is SIGKILLed: the hang the
    detectors filed resolves with the job, ends when the job was last heard, and is left
    alone afterwards (it was revised every pass, "waited 539 s", for as long as the daemon
    ran)."""
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://",
                            analyze_interval_s=0.2, jobs=JobLimits(gone_after_s=2.0)))
    d.start()
    try:
        with DaemonClient(f"127.0.0.1:{d.port}") as client:
            t0 = time.time_ns() - 5 * 10**9
            for i, req in enumerate([
                    rank_info("hung", 0, 2, "n0"), rank_info("hung", 1, 2, "n1"),
                    group_info("hung", "0", [0, 1]),
                    op_batch("hung", 0, range(200), t0=t0), op_batch("hung", 1, range(200), t0=t0),
                    op_batch("hung", 0, range(200, 201), t0=t0, t_end=False)]):
                client.send(_req(400 + i, req))
            hang = wait_for(lambda: next((r for r in client.faults("hung")
                                          if r.kind == "noncomm_hang"), None), 15,
                            what="the hang reported")
            summary = wait_for(lambda: (j := _job(client, "hung")).state == "failed" and j,
                               15, what="the silent job failed")
            ended = client.fault(hang.id)
            assert ended.state == "resolved" and ended.last_seen_ns <= summary.ended_ns
            time.sleep(1.0)                              # five more passes of the detectors
            later = client.fault(hang.id)
            assert (later.revision, later.last_seen_ns, later.summary) == \
                (ended.revision, ended.last_seen_ns, ended.summary)
    finally:
        d.stop(grace=0.5)


def test_gone_after_must_be_positive():
    with pytest.raises(ValueError, match="--job-gone-after"):
        JobLimits(gone_after_s=0)
