"""The Slurm prolog, epilog and sbatch example against a real Slurm (the recovery tests'
cluster: Debian's slurmctld, two slurmd and munge in a temporary directory). The prolog starts a
sidecar for the job, as the job's user, on the job's socket; the example's `c4 run -- torchrun`
ranks ship through it to a real daemon; the epilog stops it and removes its directory. Skips
when Slurm is missing (scripts/system-deps.sh installs it).

Without Slurm, the same scripts run by hand with the environment slurmd gives them check the
sharding of jobs over several daemons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deploy_support import DEPLOY, read_env_file
from tests.recovery.test_recovery_slurm import BINARIES, _missing, slurm_cluster
from tests.support.services import free_port, start_daemon, wait_for

SLURM = DEPLOY / "slurm"
C4_BIN = Path(sys.executable).parent / "c4"

TRAIN = """\
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
release = sys.argv[1]
deadline = time.monotonic() + 120
t = torch.ones(1024)
while time.monotonic() < deadline:
    dist.all_reduce(t)
    flag = torch.tensor([1.0 if os.path.exists(release) else 0.0])
    dist.all_reduce(flag)  # every rank leaves in the same iteration
    if flag.item() > 0:
        break
    time.sleep(0.05)
dist.destroy_process_group()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def _write_env(path: Path, **settings: str) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def test_slurm_env_file_sets_only_known_settings() -> None:
    from tests.deploy.deploy_support import command

    own = {"C4_BIN", "C4_SLURM_RUN_DIR", "C4_SLURM_SPILL_DIR", "C4_SLURM_DAEMONS",
           "C4_SLURM_WAIT", "C4_SLURM_STOP_WAIT"}
    scripts = "".join((SLURM / f"{name}.sh").read_text() for name in ("prolog", "epilog", "common"))
    for name in own:
        assert name in scripts, f"{name} is in no script"
    env = read_env_file(SLURM / "slurm.env", commented=True)
    unknown = set(env) - own - command("sidecar").envvars
    assert not unknown, f"slurm.env sets what nothing reads: {sorted(unknown)}"


@pytest.mark.network
def test_prolog_shards_jobs_over_daemons_and_epilog_stops_the_sidecar(tmp_path: Path) -> None:
    """The scripts as slurmd runs them (root, SLURM_* in the environment), without Slurm."""
    ports = [free_port(), free_port()]
    daemons = [start_daemon(tmp_path, p, name=f"daemon{i}") for i, p in enumerate(ports)]
    try:
        env_file = _write_env(
            tmp_path / "slurm.env", C4_BIN=str(C4_BIN), C4_SLURM_RUN_DIR=str(tmp_path / "run"),
            C4_SLURM_SPILL_DIR=str(tmp_path / "spool"),
            C4_SLURM_DAEMONS=",".join(f"127.0.0.1:{p}" for p in ports))
        job = {"PATH": "/usr/bin:/bin", "C4_SLURM_ENV": str(env_file), "SLURM_JOB_ID": "7",
               "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid()),
               "SLURMD_NODENAME": "nodeA"}
        out = subprocess.run([str(SLURM / "prolog.sh")], env=job, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        run_dir = tmp_path / "run" / "slurm-7"
        assert (run_dir / "sidecar.sock").is_socket(), out.stderr + (
            (run_dir / "sidecar.log").read_text() if (run_dir / "sidecar.log").exists() else "")
        pid = int((run_dir / "sidecar.pid").read_text())
        assert _alive(pid)
        # job 7 of 2 daemons: shard 1; the other daemon never hears of this sidecar
        from diagnosis.client import DaemonClient

        with DaemonClient(f"127.0.0.1:{ports[1]}") as c1, \
                DaemonClient(f"127.0.0.1:{ports[0]}") as c0:
            wait_for(lambda: any(s.host == "nodeA" for s in c1.status().sidecars), 30,
                     what="the job's sidecar to report to daemon 1")
            assert not [s for s in c0.status().sidecars if s.host == "nodeA"]
        # a second run (a later job step) does not start another one
        assert subprocess.run([str(SLURM / "prolog.sh")], env=job, timeout=60).returncode == 0
        assert int((run_dir / "sidecar.pid").read_text()) == pid

        out = subprocess.run([str(SLURM / "epilog.sh")], env=job, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert not run_dir.exists()
        assert not (tmp_path / "spool" / "slurm-7").exists()  # nothing was left unshipped
        wait_for(lambda: not _alive(pid), 10, what="the sidecar to exit")
    finally:
        for d in daemons:
            d.stop()


def _reconfigure_with_prolog(d: Path, env: dict[str, str], slurm_env: Path) -> None:
    """Add our prolog and epilog to the running test cluster (slurm.conf takes a program path,
    no arguments: a wrapper names the settings file)."""
    for name in ("prolog", "epilog"):
        wrapper = d / f"c4-{name}"
        wrapper.write_text(f"#!/bin/sh\nC4_SLURM_ENV={slurm_env} exec {SLURM / f'{name}.sh'}\n")
        wrapper.chmod(0o755)
    conf = Path(env["SLURM_CONF"])
    conf.write_text(conf.read_text() + f"Prolog={d}/c4-prolog\nEpilog={d}/c4-epilog\n")
    out = subprocess.run(["scontrol", "reconfigure"], env=env, capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(bool(_missing()) or os.geteuid() != 0,
                    reason=f"needs root and the Slurm and munge binaries ({', '.join(BINARIES)}); "
                           "scripts/system-deps.sh installs slurmctld slurmd slurm-client munge")
def test_prolog_starts_the_jobs_sidecar_and_epilog_stops_it_on_a_real_slurm() -> None:
    with slurm_cluster() as (d, env):
        port = free_port()
        daemon = start_daemon(d, port)
        try:
            run_root = d / "run"
            slurm_env = _write_env(d / "slurm.env", C4_BIN=str(C4_BIN),
                                   C4_DAEMON=f"127.0.0.1:{port}",
                                   C4_SLURM_RUN_DIR=str(run_root),
                                   C4_SLURM_SPILL_DIR=str(d / "spool"))
            _reconfigure_with_prolog(d, env, slurm_env)
            (d / "train.py").write_text(TRAIN)
            release = d / "release"
            job_env = {**env, "PATH": f"{C4_BIN.parent}:{env.get('PATH', '/usr/bin:/bin')}",
                       "NPROC_PER_NODE": "2", "RDZV_PORT": str(free_port()),
                       "MASTER_ADDR": "127.0.0.1", "C4_SLURM_RUN_DIR": str(run_root),
                       "OMP_NUM_THREADS": "1"}
            out = subprocess.run(
                ["sbatch", "--parsable", "-N", "1", "-J", "c4train", "-o", str(d / "job.out"),
                 str(SLURM / "c4-torchrun.sbatch"), str(d / "train.py"), str(release)],
                env=job_env, capture_output=True, text=True, timeout=30, cwd=d)
            assert out.returncode == 0, out.stderr
            jid = out.stdout.strip().split(";")[0]
            run_dir = run_root / f"slurm-{jid}"

            def job_output() -> str:
                parts = [p.read_text()[-2000:] for p in (d / "job.out", run_dir / "sidecar.log")
                         if p.exists()]
                return "\n".join(parts)

            # the prolog started the job's sidecar, on the job's socket
            try:
                wait_for(lambda: (run_dir / "sidecar.sock").is_socket(), 90,
                         what="the prolog's sidecar socket")
            except AssertionError:
                raise AssertionError(f"no sidecar socket in {run_dir}:\n{job_output()}") from None
            pid = int((run_dir / "sidecar.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert b"sidecar" in cmdline and str(run_dir / "sidecar.sock").encode() in cmdline

            # the example's ranks ship through it: the daemon knows the job and the sidecar
            from diagnosis.client import DaemonClient

            with DaemonClient(f"127.0.0.1:{port}") as client:
                def job_seen():
                    return [j for j in client.jobs() if j.job == f"c4train-{jid}" and j.ops > 0]
                try:
                    wait_for(job_seen, 120, interval=0.5, what="the job's records in the daemon")
                except AssertionError:
                    raise AssertionError(f"no records of job {jid}:\n{job_output()}") from None
                (job,) = job_seen()
                assert job.ranks_seen == 2
                # the sidecar is named after the Slurm node (SLURMD_NODENAME)
                assert {s.host for s in client.status().sidecars} & {"n1", "n2"}
            assert _alive(pid)

            # the job ends; the epilog stops the sidecar and removes its directory
            release.touch()
            wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", jid], env=env,
                                                capture_output=True, text=True).stdout.strip(),
                     120, interval=0.5, what="the job to finish")
            wait_for(lambda: not run_dir.exists(), 60, what="the epilog to remove the run dir")
            wait_for(lambda: not _alive(pid), 30, what="the sidecar to exit")
            assert not (d / "spool" / f"slurm-{jid}").exists()
        finally:
            daemon.stop()
