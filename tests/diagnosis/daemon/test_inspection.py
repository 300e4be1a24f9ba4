"""A hang report gets its culprit's PID, host, Python stack (py-spy, on a real process) and a
Flight Recorder dump request; refusals are said, not raised."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto import c4_pb2
from c4.report import FaultReport, Suspect
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.inspection import InspectConfig
from diagnosis.daemon.server import Daemon
from diagnosis.inspection.process import inspect_process, python_stack
from tests.support.services import free_port, wait_for

pytestmark = [pytest.mark.network]

JOB = "train-hang"
PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")


@pytest.fixture
def frozen(tmp_path):
    """A Python process that sleeps in a function of its own, stopped like a frozen rank, with
    the environment that makes torch's NCCL backend take dump requests on a FIFO."""
    stem = str(tmp_path / "fr_")
    os.mkfifo(f"{stem}3.pipe")
    # the end torch's NCCL backend holds open (O_RDONLY | O_NONBLOCK) while its group is up
    reader = os.open(f"{stem}3.pipe", os.O_RDONLY | os.O_NONBLOCK)
    code = "import time\ndef train_step():\n    time.sleep(120)\ntrain_step()\n"
    proc = subprocess.Popen([sys.executable, "-c", code],
                            env={**os.environ, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": stem,
                                 "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                                 "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / "dump_")})
    wait_for(lambda: "train_step" in python_stack(proc.pid, py_spy=PY_SPY)[0], 20,
             what="the process to enter train_step")
    proc.send_signal(19)  # SIGSTOP: frozen as a hung rank is
    yield proc, reader, tmp_path
    proc.kill()
    proc.wait()
    os.close(reader)


def _rank(pid: int, rank: int, host: str) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(sidecar="s", seq=rank + 1, rank=c4_pb2.RankInfo(
        job=JOB, rank=rank, world_size=8, host=host, pid=pid, backend="nccl"))


def test_hang_report_carries_pid_host_stack_and_dump_request(frozen):
    proc, reader, tmp = frozen
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://",
                            inspect=InspectConfig(local_hosts=frozenset({"node-a"}),
                                                  py_spy=PY_SPY)))
    d.start()
    try:
        addr = f"127.0.0.1:{d.port}"
        with DaemonClient(addr) as c:
            c.send(_rank(proc.pid, 3, "node-a"))
            c.send(_rank(4242, 4, "node-b"))
        report = d.hub.file(JOB, FaultReport(
            kind="noncomm_hang", first_seen_ns=1, summary="rank 3 never entered all_reduce",
            suspects=(Suspect("rank", "3", 0.95, rank=3), Suspect("rank", "4", 0.9, rank=4)),
            evidence={"culprits": [3, 4]}, id="noncomm_hang:3,4"))
        got = wait_for(lambda: d.store.get_fault(report.id).evidence.get("processes"), 30,
                       what="the report's processes")
        local, remote = sorted(got, key=lambda p: p["rank"])
        assert (local["pid"], local["host"], local["local"]) == (proc.pid, "node-a", True)
        assert "train_step" in local["stack"], local
        assert local["flight_recorder"].startswith("requested") and str(tmp / "dump_3") in \
            local["flight_recorder"]
        assert os.read(reader, 16) == b"1\n"
        assert (remote["pid"], remote["host"], remote["stack"]) == (4242, "node-b", "")
        assert "py-spy dump --pid 4242" in remote["stack_note"]
        # a later revision from the engine keeps what the daemon added
        d.hub.file(JOB, FaultReport(kind="noncomm_hang", first_seen_ns=1, summary="still",
                                    suspects=report.suspects, evidence={"culprits": [3, 4]},
                                    id="noncomm_hang:3,4"))
        assert len(d.store.get_fault(report.id).evidence["processes"]) == 2
        res = CliRunner().invoke(build_app(), ["faults", "show", report.id, "--daemon", addr])
        assert res.exit_code == 0, res.output
        assert f"pid {proc.pid} on host node-a" in res.output
        assert f"py-spy dump --pid {proc.pid}" in res.output and "train_step" in res.output
        assert "Flight Recorder: requested" in res.output
    finally:
        d.stop(grace=0.5)


def _fake_py_spy(tmp_path, message: str) -> str:
    # as py-spy fails: its error, then a backtrace
    exe = tmp_path / "py-spy"
    exe.write_text(f"#!/bin/sh\necho '{message}' >&2\necho '' >&2\n"
                   "echo 'Stack backtrace:' >&2\necho '  10: main' >&2\nexit 1\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_refusals_are_reported_with_what_allows_them(tmp_path):
    denied = _fake_py_spy(tmp_path, "Error: Permission Denied (os error 13)")
    facts = inspect_process(1, "node-a", os.getpid(), backend="gloo", local=True,
                            py_spy=denied)
    assert facts.stack == "" and "not permitted" in facts.stack_note
    assert "Permission Denied" in facts.stack_note and "main" not in facts.stack_note
    assert "CAP_SYS_PTRACE" in facts.stack_note
    assert "gloo backend keeps no Flight Recorder" in facts.flight_recorder
    missing = inspect_process(1, "node-a", os.getpid(), local=True,
                              py_spy=str(tmp_path / "nowhere" / "py-spy"))
    assert "not installed" in missing.stack_note
    assert "not configured" in missing.flight_recorder  # this process has no FR environment
    gone = inspect_process(1, "node-a", 2**22 + 17, local=True, py_spy=PY_SPY)
    assert "gone" in gone.stack_note


RANK_CHILD = """
import sys, time
from tests.support.frames import RankConnection, rank_info, group_info
conn = RankConnection(sys.argv[1])
conn.send(rank_info("far", 2, 4, "node-x"), group_info("far", "0", [0, 1, 2, 3]))
def train_step():
    time.sleep(120)
train_step()
"""


def test_a_rank_on_another_node_is_inspected_by_its_sidecar(tmp_path):
    """The daemon asks the sidecar of the culprit's host (a real sidecar process, real gRPC);
    the sidecar runs py-spy on the process that registered the rank on its socket."""
    from tests.support.services import start_sidecar

    port = free_port()
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{port}", store="memory://",
                            inspect=InspectConfig(local_hosts=frozenset({"not-here"}))))
    d.start()
    car, sock = start_sidecar(tmp_path, port, "node-x")
    child = subprocess.Popen([sys.executable, "-c", RANK_CHILD, str(sock)],
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        rec = wait_for(lambda: [r for r in d.store.ranks("far") if r.rank == 2], 30,
                       what="the rank registered")[0]
        assert rec.pid == child.pid and rec.host == "node-x"
        wait_for(lambda: "train_step" in python_stack(child.pid, py_spy=PY_SPY)[0], 20,
                 what="the child in train_step")
        report = d.hub.file("far", FaultReport(
            kind="noncomm_hang", first_seen_ns=1, summary="rank 2 never entered all_reduce",
            suspects=(Suspect("rank", "2", 0.95, rank=2),), evidence={"culprits": [2]},
            id="noncomm_hang:2"))

        def stack() -> dict | None:
            procs = d.store.get_fault(report.id).evidence.get("processes", [])
            return next((p for p in procs if p.get("stack")), None)

        got = wait_for(stack, 30, what="the sidecar's inspection")
        assert got["pid"] == child.pid and got["host"] == "node-x" and got["local"] is True
        assert "train_step" in got["stack"]
        assert "gloo backend keeps no Flight Recorder" in got["flight_recorder"]
    finally:
        child.kill()
        child.wait()
        car.stop()
        d.stop(grace=0.5)
