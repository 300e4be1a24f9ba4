"""The Slurm backend against a real Slurm (Debian's slurmctld and two slurmd on this machine,
with munge, configured in a temporary directory): on a fault report the controller drains the
node running a batch job, with c4's reason, the job is really requeued and runs again on the
other node, and release returns the node to service. Skips when the Slurm or munge binaries
are missing (scripts/system-deps.sh installs them)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from c4.processes import free_port
from c4.report import FaultReport, Suspect
from recovery.controller import Controller
from recovery.errors import IsolationError
from recovery.isolation.slurm import SlurmIsolator
from recovery.journal import Journal
from recovery.policy import ISOLATE, Placement, Policy
from recovery.states import State
from tests.support.services import wait_for

pytestmark = [pytest.mark.root, pytest.mark.slow]

BINARIES = ("slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "munged")


def _missing() -> list[str]:
    return [b for b in BINARIES if not (shutil.which(b) or Path(f"/usr/sbin/{b}").exists())]


CONF = """\
ClusterName=c4test
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/linear
ReturnToService=2
JobRequeue=1
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=n1 NodeHostname=localhost Port={n1_port} CPUs=1 State=UNKNOWN
NodeName=n2 NodeHostname=localhost Port={n2_port} CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
"""


def _run(*args: str, env: dict[str, str]) -> str:
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 0, f"{args}: {out.stderr}"
    return out.stdout


@contextlib.contextmanager
def slurm_cluster() -> Iterator[tuple[Path, dict[str, str]]]:
    # munged runs as the munge user, which must reach its socket directory: not under pytest's
    # root-only tmp
    d = Path(tempfile.mkdtemp(prefix="c4t-slurm-"))
    munge_dir = d / "munge"
    munge_dir.mkdir()
    munge = pwd.getpwnam("munge")
    os.chmod(d, 0o755)
    os.chown(munge_dir, munge.pw_uid, munge.pw_gid)
    os.chmod(munge_dir, 0o755)  # munged wants its socket directory searchable by all
    sock = munge_dir / "munge.socket"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen(
            ["runuser", "-u", "munge", "--", "munged", "-F", f"--socket={sock}",
             f"--pid-file={munge_dir}/munged.pid", f"--log-file={munge_dir}/munged.log",
             f"--seed-file={munge_dir}/munged.seed"], start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(sock.exists, 20, what="munged's socket")
        conf = d / "slurm.conf"
        (d / "state").mkdir()
        conf.write_text(CONF.format(d=d, munge_socket=sock, ctld_port=free_port(),
                                    n1_port=free_port(), n2_port=free_port()))
        env = {**os.environ, "SLURM_CONF": str(conf)}
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                      start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        for node in ("n1", "n2"):
            procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf), "-N", node],
                                          env=env, start_new_session=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def idle() -> bool:
            out = _run("sinfo", "-h", "-N", "-o", "%N %T", env=env)
            return out.split().count("idle") == 2
        try:
            wait_for(idle, 60, what="both slurmd nodes idle")
        except AssertionError:
            logs = "\n".join(p.read_text()[-1500:] for p in d.glob("*.log"))
            raise AssertionError(f"slurm did not come up:\n{logs}") from None
        yield d, env
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 15)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(bool(_missing()) or os.geteuid() != 0,
                    reason=f"needs root and the Slurm and munge binaries ({', '.join(BINARIES)}); "
                           "scripts/system-deps.sh installs slurmctld slurmd slurm-client munge")
def test_drain_requeue_and_release_on_a_real_slurm():
    with slurm_cluster() as (d, env):
        runs = d / "runs.txt"
        _run("sbatch", "-J", "c4job", "-N", "1", "--requeue", "-o", "/dev/null", "--wrap",
             f"echo ${{SLURM_RESTART_COUNT:-0}} $SLURMD_NODENAME >> {runs}; sleep 600", env=env)
        wait_for(lambda: runs.exists() and runs.read_text().strip(), 60,
                 what="the batch job to start")
        count, node = runs.read_text().split()
        assert count == "0"
        other = {"n1": "n2", "n2": "n1"}[node]

        iso = SlurmIsolator(env={"SLURM_CONF": env["SLURM_CONF"]})
        assert iso.isolated() == {}
        # the controller acts on a report naming the job's node: drain, then requeue
        journal = Journal(d / "journal.db")
        ctl = Controller(journal, iso, Policy(),
                         placement=lambda job: Placement(frozenset({"n1", "n2"})))
        report = FaultReport(kind="noncomm_slow", suspects=(Suspect("host", node, 0.9),),
                             first_seen_ns=time.time_ns(), summary=f"{node} is slow",
                             id="abc", job="c4job")
        assert ctl.handle(report).action == ISOLATE
        held = iso.isolated()
        assert list(held) == [node] and held[node].startswith("c4: fault abc of job c4job")
        show = _run("scontrol", "show", "node", node, env=env)
        assert "DRAIN" in show and "c4: fault abc" in show
        iso.isolate(node, "again")                          # idempotent: the reason stays
        assert iso.isolated()[node] == held[node]
        (rec,) = journal.recoveries()
        assert rec.state == State.RESTARTING and rec.backend == "slurm"
        assert "requeued excluding" in rec.note

        wait_for(lambda: len(runs.read_text().split()) == 4, 60,
                 what="the requeued job to run again", interval=0.5)
        again_count, again_node = runs.read_text().split()[2:]
        assert again_node == other and int(again_count) >= 1
        jid = iso.job_id("c4job")
        exc = _run("scontrol", "show", "job", jid, env=env)
        assert f"ExcNodeList={node}" in exc

        iso.release(node)
        assert iso.isolated() == {}
        with pytest.raises(IsolationError, match="finds 0 Slurm jobs"):
            iso.job_id("no-such-job")
        _run("scancel", jid, env=env)
        time.sleep(0.1)
