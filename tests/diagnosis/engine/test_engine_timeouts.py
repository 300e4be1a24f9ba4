"""Hangs that end in failed calls: with NCCL, ranks waiting for a hung peer do not wait for ever;
the watchdog fails their call after its timeout and the job exits. The records then show failed
calls and a job that went silent, which must not be taken for a teardown (a stop fails calls as
soon as it strikes, not after waiting past the hang bound)."""

from __future__ import annotations

import numpy as np

from diagnosis.trace import TraceWriter
from tests.support.engine_builders import diagnose_written, lockstep

MS = 1_000_000
RANKS = 8


def write_job(path, last: str, culprit: int = 5, iterations: int = 30,
              timeout_ms: float = 30_000, seed: int = 0) -> None:
    """Ranks 0-7 all-reduce after 20 ms of compute each iteration. The last call:
    ``absent``: ``culprit`` never enters it, the others fail with ``timeout`` after
    ``timeout_ms``; ``stuck``: everyone enters, all fail with ``timeout``; ``error_first``:
    ``culprit`` fails at once with ``error``, the others time out; ``stop``: every rank fails
    with ``error`` 3 ms after entering (a launcher killing the job). Then the job is silent."""
    rng = np.random.default_rng(seed)
    free = np.zeros(RANKS)
    with TraceWriter(path) as w:
        w.group("world", list(range(RANKS)))
        for seq in range(iterations):
            enter = free + 20 * MS * np.exp(rng.normal(0, 0.03, RANKS))
            if seq < iterations - 1:
                end = enter.max() + 4 * MS
                lockstep(w, "world", seq, "all_reduce", 1 << 24, enter, end)
                free = np.full(RANKS, end)
                continue
            for r in range(RANKS):
                if last == "absent" and r == culprit:
                    continue
                if last == "stop":
                    w.op(r, "world", seq, "all_reduce", 1 << 24, int(enter[r]),
                         int(enter[r] + 3 * MS), status="error")
                elif last == "error_first" and r == culprit:
                    w.op(r, "world", seq, "all_reduce", 1 << 24, int(enter[r]),
                         int(enter[r] + 1 * MS), status="error")
                else:
                    w.op(r, "world", seq, "all_reduce", 1 << 24, int(enter[r]),
                         int(enter[r] + timeout_ms * MS), status="timeout")
            w.end(int(enter.max() + (timeout_ms + 2_000) * MS))


def diagnose(tmp_path, **kw):
    return diagnose_written(tmp_path / "trace.jsonl", write_job, **kw)


def test_peers_timing_out_on_a_rank_that_never_came_is_its_hang(tmp_path):
    reports = diagnose(tmp_path, last="absent", culprit=5)
    assert [r.kind for r in reports] == ["noncomm_hang"]
    assert [s.rank for s in reports[0].suspects] == [5]
    assert reports[0].evidence["timed_out"] is True


def test_every_member_timing_out_inside_the_call_is_a_comm_hang(tmp_path):
    reports = diagnose(tmp_path, last="stuck")
    assert [r.kind for r in reports] == ["comm_hang"]


def test_a_rank_failing_at_once_is_an_error_even_when_peers_time_out_later(tmp_path):
    reports = diagnose(tmp_path, last="error_first", culprit=2)
    assert [r.kind for r in reports] == ["error"]
    assert [s.rank for s in reports[0].suspects] == [2]


def test_every_rank_failing_at_once_is_a_stop_not_a_hang(tmp_path):
    # the calls fail 3 ms after entry on every rank: a stop, not a hang
    assert diagnose(tmp_path, last="stop") == []
