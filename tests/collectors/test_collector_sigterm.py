"""A rank stopped by SIGTERM ships what it recorded, including the call it is stuck in, and then
ends exactly as it would have without c4: real gloo ranks, a real Unix-socket sink.

Flushes every 30 s and open rows after 60 s: only the SIGTERM path can deliver these rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from collector_testkit import REPO, FrameSink, launch_ranks, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.network]

HERE = Path(__file__).resolve().parent
CALLS = 23
QUIET = {"C4_FLUSH_INTERVAL": "30", "C4_OPEN_AFTER": "60", "C4_JOB": "term"}


class Lines:
    """Collects a process's output lines on a thread, so that the test can wait for one."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, word: str, timeout: float = 90) -> None:
        wait_for(lambda: word in self.lines, timeout, f"{word!r} in the output {self.lines}")


@pytest.fixture
def sink(tmp_path):
    s = FrameSink(tmp_path / "sidecar.sock")
    yield s
    s.close()


@pytest.fixture
def job(tmp_path, sink):
    """Starts the job script on ``world`` ranks; kills whatever is left at the end."""
    started: list[subprocess.Popen] = []

    def start(mode: str, world: int) -> tuple[list[subprocess.Popen], list[Lines]]:
        env = {**QUIET, "C4_SIDECAR_SOCKET": str(sink.path)}
        procs = launch_ranks(HERE / "collector_sigterm_job.py", world, env,
                             [mode, str(CALLS), str(tmp_path / "go")])
        started.extend(procs)
        return procs, [Lines(p) for p in procs]

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def _rows(sink: FrameSink, rank: int) -> list[dict]:
    return [r for r in sink.op_rows() if r["rank"] == rank and r["op"] == "all_reduce"]


def test_rank_blocked_in_a_collective_ships_it_open_then_dies_of_sigterm(job, sink):
    (r0, r1), (out0, out1) = job("blocked", 2)
    out0.wait("blocked")  # rank 0 is inside gloo's all_reduce #CALLS, which rank 1 never joins
    out1.wait("waiting")
    r0.send_signal(signal.SIGTERM)
    assert r0.wait(30) == -signal.SIGTERM, out0.lines
    rows = _rows(sink, 0)
    assert sorted(r["seq"] for r in rows if r["t_end_ns"] != -1) == list(range(CALLS))
    (open_row,) = [r for r in rows if r["t_end_ns"] == -1]
    assert open_row["seq"] == CALLS and open_row["t_enter_ns"] > 0
    assert open_row["nbytes"] == 32 and open_row["pg"] == "0"
    assert "returned" not in out0.lines
    # Rank 1 sleeps in Python: its main thread runs the stand-in handler; same outcome.
    r1.send_signal(signal.SIGTERM)
    assert r1.wait(30) == -signal.SIGTERM, out1.lines
    assert sorted(r["seq"] for r in _rows(sink, 1)) == list(range(CALLS))
    stats = {m.stats.collectors[0].rank: m.stats.collectors[0] for m in sink.of_kind("stats")}
    assert (stats[0].recorded, stats[0].shipped, stats[0].dropped) == (CALLS, CALLS, 0)
    # its last words say when it last spoke: the daemon's sign of life for the rank
    assert stats[0].t_ns >= open_row["t_enter_ns"] and stats[0].leaving


def test_rank_busy_in_python_ships_its_rows_then_dies_of_sigterm(job, sink):
    (proc,), (out,) = job("busy", 1)
    out.wait("busy")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM, out.lines
    rows = _rows(sink, 0)
    assert sorted(r["seq"] for r in rows) == list(range(CALLS))
    assert all(r["t_end_ns"] >= r["t_enter_ns"] for r in rows)


def test_programs_own_handler_runs_and_decides_the_exit_status(job, sink):
    (proc,), (out,) = job("busy-handler", 1)
    out.wait("busy")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 7, out.lines
    assert "handler" in out.lines
    assert sorted(r["seq"] for r in _rows(sink, 0)) == list(range(CALLS))


def test_blocked_rank_with_its_own_handler_ships_the_open_call_and_keeps_running(
        job, sink, tmp_path):
    (r0, r1), (out0, out1) = job("blocked-handler", 2)
    out0.wait("blocked")
    out1.wait("waiting")
    r0.send_signal(signal.SIGTERM)
    # The program's handler cannot run before the collective returns, but the rows go out now.
    wait_for(lambda: any(r["t_end_ns"] == -1 for r in _rows(sink, 0)), 30, "the open row")
    assert r0.poll() is None
    rows = _rows(sink, 0)
    assert sorted(r["seq"] for r in rows if r["t_end_ns"] != -1) == list(range(CALLS))
    assert [r["seq"] for r in rows if r["t_end_ns"] == -1] == [CALLS]
    (tmp_path / "go").touch()  # rank 1 joins: the collective returns, the handler runs
    assert r0.wait(30) == 7, out0.lines
    assert "handler" in out0.lines
    r1.send_signal(signal.SIGTERM)  # in Python: its handler runs at once, then atexit ships
    assert r1.wait(30) == 7, out1.lines
    assert sorted(r["seq"] for r in _rows(sink, 1)) == list(range(CALLS + 1))


def test_torchrun_stopped_with_sigterm_stops_its_workers_which_ship_their_last_rows(
        sink, tmp_path):
    """torchrun's agent forwards SIGTERM to its workers: both ship, the blocked one its open
    call. The agent itself imports torch.distributed but never ships, so keeps its handler."""
    env = {**os.environ, **QUIET, "C4_SIDECAR_SOCKET": str(sink.path), "PYTHONPATH": str(REPO),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(HERE / "collector_sigterm_job.py"), "blocked", str(CALLS),
           str(tmp_path / "go")]
    agent = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        out = Lines(agent)
        out.wait("blocked")
        out.wait("waiting")
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(60) != 0
        rows = [r for r in sink.op_rows() if r["op"] == "all_reduce"]
        for rank in (0, 1):
            done = sorted(r["seq"] for r in rows if r["rank"] == rank and r["t_end_ns"] != -1)
            assert done == list(range(CALLS)), (rank, out.lines)
        assert [(r["rank"], r["seq"]) for r in rows if r["t_end_ns"] == -1] == [(0, CALLS)]
        assert {m.rank.rank for m in sink.of_kind("rank")} == {0, 1}  # never the agent
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait(10)
