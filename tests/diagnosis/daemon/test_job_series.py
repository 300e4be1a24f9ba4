"""Per-job series: call times land in the right buckets by kind, the step is found from the
repeating pattern of the lowest rank's calls, and the series stay bounded."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto.codec import Columns
from diagnosis.daemon.job_series import CALL_BUCKETS, JobSeries, step_seconds
from diagnosis.store import OpRows, Write

T0 = 1_700_000_000_000_000_000


def _ops(job: str, rank: int, calls: list[tuple[str, str, int, int, int]]) -> Write:
    """calls: (pg, op, nbytes, t_enter_ns, duration_ns; -1: still open)."""
    strings = sorted({c[0] for c in calls} | {c[1] for c in calls})
    idx = {s: i for i, s in enumerate(strings)}
    n = len(calls)
    enter = np.array([c[3] for c in calls], np.int64)
    took = np.array([c[4] for c in calls], np.int64)
    cols = Columns({
        "rank": np.full(n, rank, np.int32),
        "pg": np.array([idx[c[0]] for c in calls], np.uint32),
        "seq": np.arange(n, dtype=np.int64),
        "op": np.array([idx[c[1]] for c in calls], np.uint32),
        "nbytes": np.array([c[2] for c in calls], np.int64),
        "dtype": np.zeros(n, np.uint32), "t_enter_ns": enter,
        "t_start_ns": enter + 1000, "t_end_ns": np.where(took >= 0, enter + 1000 + took, -1),
        "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32)}, strings)
    return Write("car", 1, OpRows(job, 0, cols))


def _loop(steps: int, step_ns: int, pattern: list[tuple[str, str, int]], t0: int = T0,
          checkpoint_every: int = 0) -> list[tuple[str, str, int, int, int]]:
    """A training loop: ``pattern`` once per step, spread over the step; a barrier every
    ``checkpoint_every`` steps."""
    calls = []
    for s in range(steps):
        start = t0 + s * step_ns
        for k, (pg, op, nbytes) in enumerate(pattern):
            calls.append((pg, op, nbytes, start + k * step_ns // (len(pattern) + 1), 50_000))
        if checkpoint_every and s % checkpoint_every == checkpoint_every - 1:
            calls.append(("world", "barrier", 0, start + step_ns - 1000, 10_000))
    return calls


def _samples(series: JobSeries) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in series.collect() for s in fam.samples}


DDP = [("world", "all_reduce", 25 << 20), ("world", "all_reduce", 25 << 20),
       ("world", "all_reduce", 7 << 20), ("world", "broadcast", 4)]


@pytest.mark.parametrize("pattern,checkpoint", [
    ([("world", "all_reduce", 64), ("pair", "all_reduce", 64)], 0),   # two groups
    (DDP, 0),                                 # repeated bucket sizes within a step
    (DDP, 10),                                # and a checkpoint barrier now and then
])
def test_step_is_the_repeating_pattern_not_the_call_spacing(pattern, checkpoint):
    series = JobSeries()
    calls = _loop(60, 120_000_000, pattern, checkpoint_every=checkpoint)
    series.observe([_ops("j", 0, calls[:70]), _ops("j", 0, calls[70:])])  # across batches
    assert _samples(series)[("c4_job_step_seconds", (("job", "j"),))] == pytest.approx(0.12)


def test_no_step_without_a_repeating_pattern():
    rng = np.random.default_rng(3)
    sigs = rng.integers(0, 1 << 40, 300)
    assert step_seconds(sigs, np.arange(300, dtype=np.int64) * 1000) is None
    assert step_seconds(np.zeros(2, np.int64), np.arange(2, dtype=np.int64)) is None


def test_the_step_follows_the_lowest_rank():
    series = JobSeries()
    series.observe([_ops("j", 3, _loop(40, 50_000_000, DDP))])
    series.observe([_ops("j", 1, _loop(40, 80_000_000, DDP))])
    assert _samples(series)[("c4_job_step_seconds", (("job", "j"),))] == pytest.approx(0.08)
    series.observe([_ops("j", 2, _loop(40, 10_000_000, DDP))])   # not the lowest: ignored
    assert _samples(series)[("c4_job_step_seconds", (("job", "j"),))] == pytest.approx(0.08)


def test_call_times_by_kind_in_cumulative_buckets():
    series = JobSeries()
    calls = [("w", "all_reduce", 8, T0, 300_000), ("w", "all_reduce", 8, T0 + 1, 2_000_000),
             ("w", "send", 8, T0 + 2, 40_000), ("w", "recv", 8, T0 + 3, -1)]  # open: not yet
    series.observe([_ops("j", 0, calls)])
    got = _samples(series)
    coll = {dict(k[1])["le"]: v for k, v in got.items()
            if k[0] == "c4_job_collective_seconds_bucket" and ("kind", "collective") in k[1]}
    assert coll["0.00025"] == 0 and coll["0.0005"] == 1 and coll["0.0025"] == 2
    assert coll["+Inf"] == 2 and len(coll) == len(CALL_BUCKETS) + 1
    key = (("job", "j"), ("kind", "collective"))
    assert got[("c4_job_collective_seconds_count", key)] == 2
    assert got[("c4_job_collective_seconds_sum", key)] == pytest.approx(0.0023)
    assert got[("c4_job_collective_seconds_count", (("job", "j"), ("kind", "p2p")))] == 1


def test_series_are_bounded_by_jobs_and_idleness():
    now = [0.0]
    series = JobSeries(max_jobs=3, idle_s=60.0, clock=lambda: now[0])
    for i in range(5):
        series.observe([_ops(f"job{i}", 0, _loop(5, 1_000_000, DDP))])
    jobs = {dict(k[1])["job"] for k in _samples(series)}
    assert jobs == {"job2", "job3", "job4"}          # the most recently heard
    now[0] = 30.0
    series.observe([_ops("job3", 0, _loop(5, 1_000_000, DDP))])
    now[0] = 70.0
    assert {dict(k[1])["job"] for k in _samples(series)} == {"job3"}   # others idle 70 s
    series.forget("job3")
    assert not _samples(series)
