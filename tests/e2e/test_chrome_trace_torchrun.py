"""``c4 export JOB --chrome-trace`` of a real job: `c4 run -- torchrun` with 2 gloo ranks through
the real hook, a sidecar and a daemon; rank 1 is stopped with SIGSTOP. The file follows the
trace-event format and holds both ranks' calls on their threads and the hang with its id and
suspect."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.processes import Service, c4_command
from diagnosis.client import DaemonClient
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for
from tests.support.trace_events import check_trace_events

pytestmark = [pytest.mark.multiprocess, pytest.mark.network, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "steady_job.py"
REPO = Path(__file__).resolve().parents[2]


def test_export_of_a_real_job_holds_its_calls_and_its_fault(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port, extra=["--analyze-interval", "0.5"])
    car, sock = start_sidecar(tmp_path, port, "node0")
    env = {"C4_TEST_LOG": str(tmp_path / "pids"), "C4_TEST_RATE": "50", "C4_HOST": "node0",
           "C4_TEST_SECONDS": "90", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    job = Service([*c4_command("run", "--job", "ct", "--sidecar-socket", str(sock), "--"),
                   sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", "2", str(SCRIPT)], tmp_path / "job.log", env=env).start()
    addr = f"127.0.0.1:{port}"
    try:
        with DaemonClient(addr) as client:
            wait_for(lambda: len(client.ops("ct")) > 400, 120, what="calls of both ranks")
            pid = int((tmp_path / "pids" / "rank1.pid").read_text())
            os.kill(pid, signal.SIGSTOP)
            report = wait_for(lambda: [r for r in client.faults("ct")
                                       if any(s.rank == 1 for s in r.suspects)], 60,
                              what="a report naming the stopped rank 1")[0]
            stored = len(client.ops("ct"))
        out = tmp_path / "ct.json"
        res = CliRunner().invoke(build_app(), ["export", "ct", "--chrome-trace", str(out),
                                               "--daemon", addr])
        assert res.exit_code == 0, res.output
        doc = json.loads(out.read_text())
        events = check_trace_events(doc)
    finally:
        job.kill()
        for f in (tmp_path / "pids").glob("rank*.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(f.read_text()), signal.SIGKILL)
        car.stop()
        daemon.stop()
    calls = [e for e in events if e["ph"] == "X" and e["cat"] == "collective"]
    assert len(calls) >= stored and doc["otherData"]["calls"] == len(calls)
    threads = {e["tid"] for e in calls}
    assert threads == {0, 1}
    assert {e["name"].removesuffix(" (open)") for e in calls} == {"all_reduce"}
    assert {e["args"]["pg"] for e in calls} >= {"0"}
    hosts = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert "node0" in hosts
    marks = [e for e in events if e["ph"] == "i" and e["args"].get("id") == report.id]
    assert any(e["s"] == "t" and e["tid"] == 1 for e in marks), marks
    assert any(s["rank"] == 1 for s in marks[0]["args"]["suspects"])
    assert marks[0]["args"]["kind"] == report.kind
