"""``c4 run --nccl-inspector``: the variables that make the Inspector write what c4 needs, set
in the job's real environment (the command prints it), the user's own values kept except a
dump interval that writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from diagnosis.nccl.inspector_env import DUMP_INTERVAL_US, inspector_environment


def test_defaults_and_a_dump_interval_that_writes_nothing():
    env = {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": "-1",
           "NCCL_INSPECTOR_DUMP_COLL_RING_SIZE": "65536"}
    notes = inspector_environment(env, "/scratch/insp", None, "j")
    assert env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] == str(DUMP_INTERVAL_US)
    assert env["NCCL_INSPECTOR_DUMP_COLL_RING_SIZE"] == "65536"           # the user's kept
    assert (env["NCCL_INSPECTOR_ENABLE"], env["NCCL_INSPECTOR_DUMP_VERBOSE"],
            env["NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES"], env["NCCL_PROFILER_PLUGIN"],
            env["NCCL_INSPECTOR_DUMP_DIR"]) == ("1", "1", "0", "inspector", "/scratch/insp")
    assert any("=-1 writes nothing" in n for n in notes)


def test_c4_run_sets_them_for_the_job(tmp_path):
    show = ("import os; print(*sorted(f'{k}={v}' for k, v in os.environ.items() "
            "if k.startswith(('NCCL_', 'C4_'))), sep='\\n')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "C4_"))}
    out = subprocess.run(
        [sys.executable, "-m", "c4", "run", "--job", "j7",
         f"--nccl-inspector={tmp_path / 'insp'}", "--nccl-profiler-plugin", "/opt/libinsp.so",
         "--no-collect", "--", sys.executable, "-c", show],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.split())
    assert got["NCCL_INSPECTOR_DUMP_DIR"] == str(tmp_path / "insp")
    assert got["NCCL_PROFILER_PLUGIN"] == "/opt/libinsp.so"
    assert got["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] == str(DUMP_INTERVAL_US)
    assert not any(k.startswith("C4_") for k in got)                  # --no-collect: no hook
    assert f"NCCL Inspector writes into {tmp_path / 'insp'}" in out.stderr
    # made before the job starts: the Inspector of each process creates it when missing, and
    # all but the first to try find it made and write nothing (seen on NCCL 2.28.9)
    assert (tmp_path / "insp").is_dir()


def test_c4_run_refuses_a_dump_directory_it_cannot_make(tmp_path):
    (tmp_path / "file").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "c4", "run", f"--nccl-inspector={tmp_path / 'file' / 'insp'}",
         "--no-collect", "--", sys.executable, "-c", "print('ran')"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and "ran" not in out.stdout
    assert "cannot make the Inspector's dump directory" in out.stderr
