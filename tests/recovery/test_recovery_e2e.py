"""The whole loop with real parts: a daemon and a sidecar (c4.processes), the recovery
controller (`c4 recover`) on the daemon's live fault stream, and `c4 launch` running a torchrun
gloo job of four single-rank hosts that checkpoints every few steps. One host's rank is slowed
from outside with a cgroup v1 CPU quota; the daemon's detectors report it, the controller
isolates its host through the blocklist, the supervisor stops the job and relaunches it on the
three others, and training continues from the last complete checkpoint with the loss it had
at that step."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from c4.lab.procs import cpu_quota
from c4.processes import REPO, Service, c4_command
from diagnosis.client import DaemonClient
from recovery.journal import Journal
from recovery.states import State
from tests.support.services import free_port, start_daemon, start_sidecar, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.network, pytest.mark.root,
              pytest.mark.slow]

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
SCRIPT = REPO / "recovery" / "train_example.py"
HOSTS = ["node0", "node1", "node2", "node3"]
SLOW = "node2"


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode(errors="replace").split("=", 1) for kv in raw if b"=" in kv)


def _progress(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _cgroup_usable() -> bool:
    return os.geteuid() == 0 and os.access(CPU_CGROUP / "cgroup.procs", os.W_OK)


@pytest.mark.skipif(not _cgroup_usable(), reason="needs root and a writable cgroup v1 cpu "
                    "controller at /sys/fs/cgroup/cpu to slow a rank from outside")
def test_slow_host_is_isolated_and_training_resumes(tmp_path):
    job = f"rec-{uuid.uuid4().hex[:6]}"
    port = free_port()
    journal_path, blocklist = tmp_path / "journal.db", tmp_path / "blocklist.json"
    common = ["--journal", str(journal_path), "--isolator", f"blocklist:{blocklist}"]
    daemon = start_daemon(tmp_path, port)
    sidecar, sock = start_sidecar(tmp_path, port, "local")
    services: list[Service] = [daemon, sidecar]
    work = tmp_path / "launch"
    try:
        controller = Service(c4_command("-v", "recover", "--daemon", f"127.0.0.1:{port}",
                                        "--trust-unauthenticated-ingest", *common),
                             tmp_path / "recover.log").start()
        services.append(controller)
        launcher = Service(
            c4_command("-v", "launch", "--job", job, "--hosts", ",".join(HOSTS),
                       "--workdir", str(work), "--sidecar-socket", str(sock), "--grace", "5",
                       *common, "--", "torchrun", str(SCRIPT)),
            tmp_path / "launch.log",
            env={"C4_TRAIN_STEPS": "100000", "C4_TRAIN_CKPT_EVERY": "10",
                 "C4_TRAIN_WORK": "30", "C4_TRAIN_BATCH": "48",
                 "C4_TRAIN_CKPT_DIR": str(tmp_path / "ckpt")}).start()
        services.append(launcher)
        first = work / f"{job}-progress-0.jsonl"
        wait_for(lambda: any(r["event"] == "checkpoint" for r in _progress(first)), 120,
                 what="the first complete checkpoint")

        with DaemonClient(f"127.0.0.1:{port}") as client:
            ranks = wait_for(lambda: len(client.ranks(job)) == 4 and client.ranks(job), 60,
                             what="the daemon to know all four ranks")
            (slow,) = [r for r in ranks if r.host == SLOW]
            assert _environ(slow.pid)["C4_HOST"] == SLOW, "the daemon's pid is the rank's"
            with cpu_quota(slow.pid, 5):
                journal = Journal(journal_path)
                # the recovery follows the report that names a node: one whose suspects tie
                # across nodes (the slowed communicator's ranks, when its transfers are
                # reported slow first) is not acted on
                rec = wait_for(lambda: next(iter(journal.recoveries(job)), None), 150,
                               what="the controller to start a recovery")
                report = next(f for f in client.faults(job) if f.id == rec.fault_id)
            # the slowed process is gone (stopped by the supervisor) or about to be
            wait_for(lambda: journal.recovery(rec.id).state.terminal, 120,
                     what="the recovery to finish")
        rec = journal.recovery(rec.id)
        assert rec.state == State.RESUMED, (rec, controller.output()[-3000:])
        assert rec.node == SLOW and report.suspects[0].rank == slow.rank, report
        assert json.loads(blocklist.read_text())["nodes"].keys() == {SLOW}
        launched = [e for e in journal.events(job) if e.kind == "launched"]
        assert [e.data["hosts"] for e in launched] == [HOSTS, [h for h in HOSTS if h != SLOW]]
        assert launched[1].data["world_size"] == 3

        # training continues from the checkpointed step with the loss it had there
        second = work / f"{job}-progress-1.jsonl"
        wait_for(lambda: len([r for r in _progress(second) if r["event"] == "step"]) >= 5, 60,
                 what="five steps after the restart")
        before = {r["step"]: r for r in _progress(first) if r["event"] == "step"}
        ckpts = [r for r in _progress(first) if r["event"] == "checkpoint"]
        after = [r for r in _progress(second) if r["event"] == "step"]
        resumed = after[0]["step"]
        assert resumed == ckpts[-1]["step"], "resumed from the newest complete checkpoint"
        assert resumed in before and after[0]["world_size"] == 3
        assert math.isclose(after[0]["loss"], before[resumed]["loss"], rel_tol=1e-5), \
            (after[0], before[resumed])

        launcher.stop()
        out = subprocess.run([sys.executable, "-m", "c4", "recoveries", "--format", "json",
                              "--job", job, "--journal", str(journal_path)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        (shown,) = doc["recoveries"]
        assert shown["state"] == "resumed" and shown["resumed_step"] == resumed
        assert list(shown["timeline_ns"]) == ["onset", "report", "isolated", "stopping",
                                              "stopped", "relaunched", "loaded",
                                              "first_step"]
        times = list(shown["timeline_ns"].values())
        assert times[1:] == sorted(times[1:]), "phases in order after the report"
        assert shown["lost_steps"] >= 1 and shown["lost_work_s"] > 0
        assert shown["load_s"] > 0
        (eff,) = doc["jobs"]
        assert eff["attempts"] == 2 and 0 < eff["ettr"] < 1
        table = subprocess.run([*c4_command("recoveries", "--job", job), "--journal",
                                str(journal_path)], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "COLUMNS": "200"})
        assert "resumed" in table.stdout and "ETTR" in table.stdout, table.stdout

        # the node is repaired: release it
        listed = subprocess.run([*c4_command("nodes", "list"), *common[2:]],
                                capture_output=True, text=True, timeout=60)
        assert SLOW in listed.stdout and report.id in listed.stdout, listed.stdout
        released = subprocess.run([*c4_command("nodes", "release", SLOW), *common[2:]],
                                  capture_output=True, text=True, timeout=60)
        assert released.returncode == 0, released.stderr
        assert json.loads(blocklist.read_text())["nodes"] == {}
    finally:
        for svc in reversed(services):
            svc.stop(timeout=15)
