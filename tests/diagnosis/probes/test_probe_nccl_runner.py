"""The nccl-tests wrapper's subprocess handling: command lines per launcher, timeouts, exit
codes, missing binaries, cut-short and failed runs.

nccl-tests cannot run on this machine (no GPU), so every binary here is a STAND-IN: a small
shell script written by the test, named like the real one, that replays a recorded output of a
real run (fixtures/nccl_tests/, see SOURCES.md) and exits with a chosen code. Stand-in launchers
(``mpirun``, ``srun``) record their arguments and run the binary they were given."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from diagnosis.probes.api import ProbeError, ProbeHost
from diagnosis.probes.nccl_runner import NcclTestsConfig, NcclTestsProber

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
H100 = FIXTURES / "all_reduce_perf_2x8_h100.txt"
SRUN = FIXTURES / "all_reduce_perf_srun_l_2x8_h100.txt"
TWO = [ProbeHost("nodeA", ranks=8), ProbeHost("nodeB", ranks=8)]


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def stand_in(bin_dir: Path, name: str, replay: Path | None, *, code: int = 0,
             after: str = "", head: int | None = None) -> Path:
    """``name`` stand-in replaying ``replay`` (its first ``head`` lines), then running
    ``after``, then exiting with ``code``."""
    bin_dir.mkdir(exist_ok=True)
    cat = "" if replay is None else (f"head -n {head} '{replay}'\n" if head else
                                     f"cat '{replay}'\n")
    return _script(bin_dir / name, f"# {name} stand-in replaying {replay and replay.name}\n"
                   f"echo $$ > '{bin_dir / (name + '.pid')}'\n{cat}{after}\nexit {code}\n")


def launcher_stand_in(tmp: Path, name: str) -> Path:
    """A ``name`` stand-in that records its arguments and runs the nccl-tests binary it got."""
    return _script(tmp / name, f"# {name} stand-in: records argv, runs the binary\n"
                   f"printf '%s\\n' \"$@\" > '{tmp / (name + '.argv')}'\n"
                   "for a in \"$@\"; do case \"$a\" in */*_perf) exec \"$a\";; esac; done\n"
                   "exit 127\n")


def test_mpirun_command_and_parsed_result(tmp_path):
    binary = stand_in(tmp_path / "bin", "all_reduce_perf", H100)
    mpirun = launcher_stand_in(tmp_path, "mpirun")
    prober = NcclTestsProber(NcclTestsConfig(
        launcher="mpirun", launcher_path=str(mpirun), bin_dir=str(tmp_path / "bin"),
        size_bytes=1 << 30, iters=7, warmup=2, env={"NCCL_IB_HCA": "mlx5_0"}, timeout_s=20))
    r = prober.group(TWO)
    argv = (tmp_path / "mpirun.argv").read_text().split("\n")
    assert argv[:6] == ["-np", "16", "-H", "nodeA:8,nodeB:8", "--tag-output", "-x"]
    assert argv[6] == "NCCL_IB_HCA" and argv[7] == str(binary)
    assert argv[8:18] == ["-b", str(1 << 30), "-e", str(1 << 30), "-n", "7", "-w", "2",
                          "-g", "1"]
    assert r.ok and r.backend == "nccl-tests" and r.hosts == ("nodeA", "nodeB")
    # the largest size of the recorded run: 8 GiB at 338.82 GB/s bus bandwidth
    assert r.size_bytes == 8589934592 and r.busbw_GBps == 338.82 and r.algbw_GBps == 180.71
    assert r.detail["ranks"] == 16 and r.detail["avg_busbw_GBps"] == pytest.approx(70.742)


def test_srun_command_and_prefixed_output(tmp_path):
    stand_in(tmp_path / "bin", "sendrecv_perf", SRUN)
    srun = launcher_stand_in(tmp_path, "srun")
    prober = NcclTestsProber(NcclTestsConfig(launcher="srun", launcher_path=str(srun),
                                             bin_dir=str(tmp_path / "bin"), timeout_s=20))
    r = prober.pair(*TWO)
    argv = (tmp_path / "srun.argv").read_text().split("\n")
    assert argv[:4] == ["-l", "-N", "2", "--ntasks-per-node=8"]
    assert argv[4] == "--nodelist=nodeA,nodeB" and argv[5].endswith("/sendrecv_perf")
    assert r.ok and r.op == "sendrecv" and r.busbw_GBps == 155.57


def test_local_launcher_drives_the_hosts_gpus_in_one_process(tmp_path):
    stand_in(tmp_path / "bin", "all_reduce_perf", H100)
    prober = NcclTestsProber(NcclTestsConfig(launcher="local", bin_dir=str(tmp_path / "bin")))
    cmd = prober.command("all_reduce", [ProbeHost("here", ranks=4)])
    assert cmd[0].endswith("all_reduce_perf") and cmd[-2:] == ["-g", "4"]
    assert prober.run("all_reduce", [ProbeHost("here", ranks=4)]).ok
    with pytest.raises(ProbeError, match="this host only"):
        prober.command("all_reduce", TWO)


def test_timeout_kills_the_run_and_what_it_started(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "all_reduce_perf", H100, head=20,
             after=f"sleep 60 & echo $! > '{tmp_path / 'child.pid'}'; wait")
    prober = NcclTestsProber(NcclTestsConfig(launcher="local", bin_dir=str(bin_dir),
                                             timeout_s=1.0))
    t0 = time.monotonic()
    r = prober.group([ProbeHost("here", ranks=2)])
    assert time.monotonic() - t0 < 10
    assert not r.ok and "timed out" in r.error
    for pid_file in (bin_dir / "all_reduce_perf.pid", tmp_path / "child.pid"):
        assert _gone(int(pid_file.read_text()))


def _gone(pid: int, within: float = 5.0) -> bool:
    """The process no longer runs (reaped, or a zombie waiting for a parent to reap it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return True
        if fields[0] in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_non_zero_exit_is_a_failed_result_with_the_reason(tmp_path):
    stand_in(tmp_path / "bin", "alltoall_perf", H100, head=30, code=3,
             after="echo 'nodeB: Test NCCL failure common.cu:1006 remote process exited' >&2")
    prober = NcclTestsProber(NcclTestsConfig(launcher="local", bin_dir=str(tmp_path / "bin")))
    r = prober.run("alltoall", [ProbeHost("here")])
    assert not r.ok and "exited with code 3" in r.error and "remote process exited" in r.error
    assert r.detail["sizes"] > 0  # what it printed before failing was parsed


def test_output_cut_short_and_failed_footer(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "all_gather_perf", H100, head=40)  # exit 0, but no footer
    prober = NcclTestsProber(NcclTestsConfig(launcher="local", bin_dir=str(bin_dir)))
    r = prober.run("all_gather", [ProbeHost("here")])
    assert not r.ok and "cut short" in r.error
    failed = tmp_path / "failed.txt"
    failed.write_text(H100.read_text().replace("Out of bounds values : 0 OK",
                                               "Out of bounds values : 12 FAILED"))
    stand_in(bin_dir, "reduce_scatter_perf", failed)
    r = prober.run("reduce_scatter", [ProbeHost("here")])
    assert not r.ok and "out of bounds 12" in r.error


def test_missing_binary_or_launcher_is_an_error_not_a_result(tmp_path):
    (tmp_path / "bin").mkdir()
    prober = NcclTestsProber(NcclTestsConfig(launcher="local", bin_dir=str(tmp_path / "bin")))
    with pytest.raises(ProbeError, match="all_reduce_perf is not in"):
        prober.group([ProbeHost("here")])
    stand_in(tmp_path / "bin", "all_reduce_perf", H100)
    prober = NcclTestsProber(NcclTestsConfig(
        launcher="mpirun", launcher_path=str(tmp_path / "no-mpirun"),
        bin_dir=str(tmp_path / "bin")))
    with pytest.raises(ProbeError, match="not found"):
        prober.group(TWO)
    with pytest.raises(ProbeError, match="unknown nccl-tests operation"):
        prober.run("broadcast", TWO)


def test_output_that_is_not_nccl_tests(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "all_reduce_perf", "# all_reduce_perf stand-in printing a usage error\n"
            "echo 'invalid option -- x'\n")
    prober = NcclTestsProber(NcclTestsConfig(launcher="local", bin_dir=str(bin_dir)))
    r = prober.group([ProbeHost("here")])
    assert not r.ok and "no nccl-tests output" in r.error
