"""``c4 faults``, ``c4 jobs``, ``c4 status`` against a real daemon (in this process, real gRPC),
run as a user would with typer's runner: output goes to a pipe, not a terminal."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto import c4_pb2
from c4.report import FaultReport, Suspect
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.services import free_port

pytestmark = [pytest.mark.network]

LONG_SUMMARY = ("rank 3 stopped making progress in all_reduce on pg tp-0 while its peers "
                "waited for it; the process did not exit and its host keeps reporting")


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://"))
    d.start()
    yield d
    d.stop(grace=0.5)


@pytest.fixture(scope="module")
def hang(daemon):
    return daemon.hub.file("train-a", FaultReport(
        kind="noncomm_hang", suspects=(Suspect("rank", "3", 0.9, rank=3),),
        first_seen_ns=1_700_000_000_000_000_000, summary=LONG_SUMMARY, pg="tp-0", seq=125))


def c4(daemon, *args: str) -> str:
    res = CliRunner().invoke(build_app(), [*args, "--daemon", f"127.0.0.1:{daemon.port}"])
    assert res.exit_code == 0, res.output
    return res.output


def test_piped_fault_table_keeps_ids_and_lines_whole(daemon, hang):
    out = c4(daemon, "faults", "list")
    row = next(line for line in out.splitlines() if hang.id in line)
    assert "noncomm_hang" in row and LONG_SUMMARY in row
    assert "2023-11-14 22:13:20" in row


def test_version():
    import c4 as pkg

    res = CliRunner().invoke(build_app(), ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"c4 {pkg.__version__}"


def test_fault_without_a_call_says_where_in_words(daemon):
    r = daemon.hub.file("train-a", FaultReport(
        kind="noncomm_slow", suspects=(Suspect("rank", "1", 0.8, rank=1),),
        first_seen_ns=1_700_000_000_000_000_000, summary="rank 1 is slow", pg="0"))
    out = c4(daemon, "faults", "show", r.id)
    assert "in process group 0" in out and "None" not in out and " at 0 " not in out


def test_a_report_the_detectors_resolved_says_why_in_words(daemon):
    r = daemon.hub.file("train-a", FaultReport(
        kind="noncomm_hang", suspects=(Suspect("rank", "1", 0.9, rank=1),),
        first_seen_ns=1_700_000_000_000_000_000, last_seen_ns=1_700_000_020_000_000_000,
        summary="rank 1 stalled 20 s", state="resolved", id="noncomm_hang:1",
        evidence={"culprits": [1], "resolved": "the waiting call finished", "cleared": True}))
    out = c4(daemon, "faults", "show", r.id)
    assert "resolved at 2023-11-14 22:13:40: the waiting call finished" in out, out


def test_every_listing_has_one_json_shape_with_typed_numbers(daemon, hang):
    from diagnosis.client import DaemonClient
    from tests.support.frames import rank_info

    with DaemonClient(f"127.0.0.1:{daemon.port}") as client:
        client.send(c4_pb2.IngestRequest(sidecar="s", seq=1,
                                         rank=rank_info("train-a", 0, 2, "n0").rank))
    jobs = json.loads(c4(daemon, "jobs", "--format", "json"))["jobs"]
    (job,) = [j for j in jobs if j["job"] == "train-a"]
    assert job["world_size"] == 2 and job["ops"] == 0 and job["open_faults"] >= 1
    assert isinstance(job["first_ns"], int) and job["state"] in ("running", "unknown")
    status = json.loads(c4(daemon, "status", "--format", "json"))
    assert isinstance(status["started_ns"], int) and status["records_ingested"] >= 0
    assert "batches_rejected" in status and "duplicates" in status  # zeros stay
    reports = json.loads(c4(daemon, "faults", "list", "--format", "json"))["reports"]
    assert any(r["id"] == hang.id for r in reports)
    lines = c4(daemon, "faults", "list", "--format", "jsonl").splitlines()
    assert {json.loads(line)["id"] for line in lines} == {r["id"] for r in reports}
    lines = c4(daemon, "jobs", "--format", "jsonl").splitlines()
    assert [json.loads(line)["job"] for line in lines] == [j["job"] for j in jobs]


def test_ack_then_close_and_the_detectors_do_not_reopen(daemon):
    report = FaultReport(kind="noncomm_slow", suspects=(Suspect("rank", "5", 0.7, rank=5),),
                         first_seen_ns=1_700_000_000_000_000_000, summary="rank 5 is slow",
                         id="noncomm_slow:rank:5")
    r = daemon.hub.file("train-c", report)
    out = c4(daemon, "faults", "ack", r.id, "--by", "alice", "--note", "looking")
    assert "acknowledged by alice" in out
    listed = c4(daemon, "faults", "list", "--job", "train-c")
    assert "acked" in next(line for line in listed.splitlines() if r.id in line)
    out = c4(daemon, "faults", "close", r.id, "--by", "alice", "-m", "GPU swapped")
    assert "resolved: closed by alice: GPU swapped" in out
    again = daemon.hub.file("train-c", report)        # the engine's next revision
    assert again.state == "resolved" and again.evidence["ack"]["by"] == "alice"
    shown = c4(daemon, "faults", "show", r.id)
    assert "acknowledged by alice" in shown and "closed by alice: GPU swapped" in shown
    res = CliRunner().invoke(build_app(), ["faults", "close", "nope", "--daemon",
                                           f"127.0.0.1:{daemon.port}"])
    assert res.exit_code == 2 and "c4 faults list" in res.output


def test_faults_watch_streams_json_lines(daemon):
    import subprocess
    import sys
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "c4", "faults", "watch", "--new-only",
                             "--format", "jsonl", "--daemon", f"127.0.0.1:{daemon.port}"],
                            stdout=subprocess.PIPE, text=True)
    stop = threading.Event()

    def keep_filing() -> None:
        # the watcher subscribes some time after it starts: revise a report until it speaks
        while not stop.wait(0.3):
            daemon.hub.file("train-w", FaultReport(
                kind="comm_slow", suspects=(Suspect("link", "a:b", 0.6),),
                first_seen_ns=1, summary="slow link", id="comm_slow:a:b"))

    threading.Thread(target=keep_filing, daemon=True).start()
    try:
        got = json.loads(proc.stdout.readline())
        assert got["job"] == "train-w" and got["kind"] == "comm_slow"
        assert isinstance(got["revision"], int) and got["state"] == "open"
    finally:
        stop.set()
        proc.kill()
        proc.wait()


def test_status_marks_sidecars_that_drop(daemon):
    from diagnosis.client import DaemonClient

    stats = c4_pb2.SidecarStats(host="node9", received=10, collectors=[
        c4_pb2.CollectorStats(job="j", rank=0, recorded=421, dropped=421)])
    with DaemonClient(f"127.0.0.1:{daemon.port}") as client:
        client.send(c4_pb2.IngestRequest(sidecar="car-9", seq=1, stats=stats))
    row = next(line for line in c4(daemon, "status").splitlines() if "car-9" in line)
    assert "dropping" in row and "421" in row


def test_status_of_a_very_large_job_is_read():
    """A sidecar's statistics carry every rank's counters: 16 relayed streams of a
    131,072-rank job made an answer of 4.9 MB, past gRPC's default 4 MiB a client reads, and
    `c4 status` failed on the jobs it matters most for."""
    from c4.proto.codec import collector_columns
    from diagnosis.client import DaemonClient

    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://"))
    d.start()
    try:
        ranks = 160_000
        stats = c4_pb2.SidecarStats(host="relay0", collector_columns=collector_columns(
            c4_pb2.CollectorStats(job="big", rank=r, recorded=1_000_000 + r,
                                  t_ns=1_800_000_000_000_000_000 + r) for r in range(ranks)))
        assert stats.ByteSize() > 4 << 20
        with DaemonClient(f"127.0.0.1:{d.port}") as client:
            client.send(c4_pb2.IngestRequest(sidecar="car-big", seq=1, stats=stats))
            s = client.status()
        assert [sc.sidecar for sc in s.sidecars] == ["car-big"]
        assert "car-big" in c4(d, "status")
    finally:
        d.stop(grace=0.5)
