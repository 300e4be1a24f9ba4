"""Fault reports reach the store, the query service, the live stream and the CLI; an update
keeps its id and bumps its revision (a real daemon served over gRPC in this process)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from c4.report import FaultReport, Suspect
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.services import free_port, wait_for

pytestmark = [pytest.mark.network]


@pytest.fixture
def daemon():
    port = free_port()
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{port}", store="memory://"))
    d.start()
    yield d, f"127.0.0.1:{port}"
    d.stop(grace=1)


def _report(score: float, summary: str) -> FaultReport:
    return FaultReport(kind="noncomm_slow", first_seen_ns=1_700_000_000_000_000_000,
                       suspects=(Suspect("gpu", "node001/gpu3", score, rank=11),),
                       summary=summary, pg="dp.3", seq=41, id="slow:node001/gpu3",
                       evidence={"late_ms": [38.0, 41.5]})


def test_filed_report_is_streamed_listed_and_updated(daemon):
    d, address = daemon
    got: list[FaultReport] = []
    with DaemonClient(address) as client:
        def watch() -> None:
            for r in client.watch():
                got.append(r)
                if len(got) == 2:
                    return

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        wait_for(lambda: d.hub._subscribers, 10, what="the watcher to subscribe")
        first = d.hub.file("job-a", _report(0.8, "rank 11 is late"))
        second = d.hub.file("job-a", _report(0.97, "rank 11 is 38 ms late"))
        t.join(10)
        assert first.id == second.id and (first.revision, second.revision) == (1, 2)
        assert [r.revision for r in got] == [1, 2]
        listed = client.faults("job-a")
        assert len(listed) == 1 and listed[0].summary == "rank 11 is 38 ms late"
        shown = client.fault(first.id)
        assert shown.suspects[0] == Suspect("gpu", "node001/gpu3", 0.97, rank=11)
        assert shown.evidence == {"late_ms": [38.0, 41.5]} and shown.seq == 41


def test_cli_lists_and_shows_faults(daemon):
    d, address = daemon
    filed = d.hub.file("job-b", _report(0.9, "rank 11 is late"))
    out = subprocess.run([sys.executable, "-m", "c4", "faults", "list", "--daemon", address,
                          "--format", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["id"] for r in doc["reports"]] == [filed.id]
    assert doc["reports"][0]["suspects"][0] == {"type": "gpu", "id": "node001/gpu3",
                                                "score": 0.9, "rank": 11}
    out = subprocess.run([sys.executable, "-m", "c4", "faults", "show", filed.id,
                          "--daemon", address], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "node001/gpu3" in out.stdout and "late" in out.stdout
    out = subprocess.run([sys.executable, "-m", "c4", "faults", "show", "nope",
                          "--daemon", address], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "c4 faults list" in out.stderr and not out.stdout


def test_cli_without_daemon_says_how_to_start_one():
    out = subprocess.run([sys.executable, "-m", "c4", "jobs", "--daemon",
                          f"127.0.0.1:{free_port()}"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "c4 daemon" in out.stderr
