"""NCCL dumps: states that move past ``scheduled``, a working ``pg_config``, ranks without a dump,
mismatched calls.

There is no GPU and no NCCL on this machine, so every dump here is constructed to torch's format
(see torch_format.py: the fields, counters and encodings torch's writer produces) instead of
being recorded by a real NCCL job.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from c4.report import FaultReport
from diagnosis.flight_recorder import analyze_dumps
from tests.diagnosis.flight_recorder.torch_format import GLOO_PG_CONFIG, Recorder, world, write

ENCODINGS = ("pickle", "json")


def _ranks(report: FaultReport) -> list[int]:
    return [s.rank for s in report.suspects]


def _steps(recs: list[Recorder], n: int, pg: str = "0") -> None:
    for _ in range(n):
        for rec in recs:
            rec.collective(pg)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_rank_that_never_called_is_the_culprit_and_completed_calls_are_not_faults(
        tmp_path: Path, encoding: str) -> None:
    """Constructed to torch's format (no NCCL here): ranks 0-2 started all_reduce #6, rank 3
    completed #5 and never called #6."""
    recs = world(4)
    _steps(recs, 5)
    for rec in recs[:3]:
        rec.collective("0", state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path, encoding=encoding))
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [3]
    assert hang.top.type == "rank" and hang.top.id == "3" and 0.8 < hang.top.score <= 1
    assert (hang.pg, hang.seq) == ("0", 6)
    assert hang.summary.startswith("rank 3 never joined all_reduce #6 on process group '0'")
    assert hang.first_seen_ns == recs[0].entries[-1]["time_created_ns"]
    # every call completed: nothing to report
    world_done = world(4)
    assert analyze_dumps(write(world_done, tmp_path / "ok", encoding=encoding)) == []
    _steps(world_done, 3)
    assert analyze_dumps(write(world_done, tmp_path / "ok2", encoding=encoding)) == []


@pytest.mark.parametrize("state", ["started", "scheduled"])
def test_call_every_member_entered_and_none_finished_is_a_comm_hang(tmp_path: Path,
                                                                     state: str) -> None:
    """Constructed to torch's format (no NCCL here). ``scheduled``: the job ran without
    TORCH_NCCL_ENABLE_TIMING, so no entry is ever marked started; completion is still known."""
    recs = world(4, timing=state == "started")
    _steps(recs, 5)
    for rec in recs:
        rec.collective("0", state=state)
        rec.collective("0", state="scheduled")  # queued behind the stuck one
    # rank 1's watchdog retired the call on its timeout: retired but not completed
    recs[1].entries[-2]["retired"] = True
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "comm_hang" and (hang.pg, hang.seq) == ("0", 6)
    assert sorted(_ranks(hang)) == [0, 1, 2, 3]
    assert all(0 < s.score <= 0.5 for s in hang.suspects)
    assert "never completed" in hang.summary
    assert hang.evidence["timed_out"] == [1]
    assert hang.evidence["states"] == dict.fromkeys("0123", state)


def test_rank_whose_gpu_never_started_the_call_is_the_culprit(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): timing is on (entries reach ``started``);
    rank 2 enqueued all_reduce #4 but its stream never began it while the others did."""
    recs = world(4)
    _steps(recs, 3)
    for rec in recs:
        rec.collective("0", state="scheduled" if rec.rank == 2 else "started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [2] and hang.seq == 4
    assert "never started" in hang.summary


def test_dumps_a_moment_apart_are_not_faults(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): rank 1 dumped later and already completed
    calls the others had not issued when they dumped; every recorded call completed."""
    recs = world(3)
    _steps(recs, 4)
    recs[1].collective("0")
    recs[1].collective("0")
    assert analyze_dumps(write(recs, tmp_path)) == []
    # rank 0 dumped before it saw its all_reduce #6 finish; the others had completed it, which
    # an all_reduce cannot do unless every member took part
    recs[0].collective("0")
    recs[0].collective("0", state="started")
    recs[2].collective("0")
    recs[2].collective("0")
    recs[1].collective("0")
    assert analyze_dumps(write(recs, tmp_path / "later")) == []
    # and rank 2 dumped before it issued #7, which rank 0 is inside and rank 1 completed
    recs[0].collective("0", state="started")
    recs[1].collective("0")
    assert analyze_dumps(write(recs, tmp_path / "early")) == []


@pytest.mark.parametrize("missing", [(3,), (1,), (1, 3)])
def test_rank_without_a_dump_is_an_undumped_culprit(tmp_path: Path, missing: tuple) -> None:
    """Constructed to torch's format (no NCCL here): the missing ranks crashed before dumping;
    pg_config (correct on NCCL) says the world has 4 ranks."""
    recs = world(4)
    _steps(recs, 5)
    for rec in recs:
        if rec.rank not in missing:
            rec.collective("0", state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path, skip=missing))
    assert hang.kind == "noncomm_hang" and _ranks(hang) == list(missing)
    assert hang.evidence["no_dump"] == list(missing) and hang.seq == 6
    assert all(s.score == pytest.approx(0.8) for s in hang.suspects)
    assert "left no dump" in hang.summary


def test_undumped_rank_is_blamed_for_the_last_gloo_call_not_the_first(tmp_path: Path) -> None:
    """Constructed to torch's gloo format (states stay ``scheduled``, pg_config unusable): rank 1
    joined 20 calls and then crashed without a dump; the others wait in #21."""
    recs = world(4, backend="gloo")
    _steps(recs, 20)
    for rec in recs:
        if rec.rank != 1:
            rec.collective("0", state="scheduled")
    for rec in recs:
        for e in rec.entries:
            e["state"] = "scheduled"
            e["time_discovered_started_ns"] = e["time_discovered_completed_ns"] = None
    (hang,) = analyze_dumps(write(recs, tmp_path, skip=(1,), pg_config=GLOO_PG_CONFIG))
    assert _ranks(hang) == [1] and hang.seq == 21, hang.summary
    assert "rank 1 never joined all_reduce #21" in hang.summary


def test_pg_config_names_members_that_never_recorded_a_call(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): group '1' is {1, 2} in pg_config; rank 2
    never called on it, so its buffer holds no trace of belonging to it."""
    recs = world(3)
    for rec in recs[1:]:
        rec.group("1", [1, 2], desc="tp")
    _steps(recs, 2)
    recs[1].collective("1", state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert _ranks(hang) == [2] and (hang.pg, hang.seq) == ("1", 1)
    # the same dumps with gloo's empty pg_config: rank 2 is not known to be a member
    assert analyze_dumps(write(recs, tmp_path / "gloo", pg_config=GLOO_PG_CONFIG)) == []


def test_groups_sharing_a_name_are_told_apart_by_pg_config(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here). Before split_group hashed its names (and in
    torch's own test template), disjoint groups could share a name: '1' is {0, 1} on ranks 0, 1
    and {2, 3} on ranks 2, 3. Ranks 0 and 1 both entered their #6 and it never completed (a
    comm hang); ranks 2, 3 are only at #3 of *their* group '1', which is not a fault."""
    recs = world(4)
    for rec in recs:
        rec.group("1", [0, 1] if rec.rank < 2 else [2, 3])
    _steps(recs[:2], 5, pg="1")
    _steps(recs[2:], 3, pg="1")
    for rec in recs[:2]:
        rec.collective("1", state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "comm_hang" and sorted(_ranks(hang)) == [0, 1], hang.summary
    assert hang.seq == 6 and "'1'" in hang.summary


def test_pg_config_that_disagrees_with_the_entries_is_not_trusted(tmp_path: Path) -> None:
    """Constructed to torch's format: pg_config says '1' is {1, 2} but rank 0 calls on it too."""
    recs = world(3)
    for rec in recs:
        rec.group("1", [0, 1, 2])
    _steps(recs, 2, pg="1")
    cfg = {"1": {"name": "1", "desc": "undefined", "ranks": "[1, 2]"}}
    assert analyze_dumps(write(recs, tmp_path, pg_config=cfg)) == []


@pytest.mark.parametrize(("odd", "what"), [
    ({"sizes": ((32,),)}, "all_reduce[32] Float"),
    ({"dtype": "BFloat16"}, "all_reduce[16] BFloat16"),
    ({"op": "all_gather", "out": ((64,),)}, "all_gather[16->64] Float"),
])
def test_mismatch_names_the_minority_and_is_not_also_a_comm_hang(tmp_path: Path, odd: dict,
                                                                 what: str) -> None:
    """Constructed to torch's format (no NCCL here): at all_reduce #4 rank 2 of 4 passes another
    size, dtype or op; NCCL then hangs with every rank inside the call (started)."""
    recs = world(4)
    _steps(recs, 3)
    for rec in recs:
        rec.collective("0", state="started", **(odd if rec.rank == 2 else {}))
    (err,) = analyze_dumps(write(recs, tmp_path))
    assert err.kind == "error" and _ranks(err) == [2] and err.seq == 4
    assert err.summary.startswith(f"rank 2 called {what} where ranks 0, 1, 3 called")


def test_ranks_inside_a_stuck_transfer_are_not_culprits_of_the_next_call(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): every rank is inside all_reduce #5, which
    never completes; ranks 0 and 1 had already enqueued #6 (NCCL calls are asynchronous), ranks
    2 and 3 had not. The fault is the transfer, not ranks 2 and 3."""
    recs = world(4)
    _steps(recs, 4)
    for rec in recs:
        rec.collective("0", state="started")
    for rec in recs[:2]:
        rec.collective("0", state="scheduled")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "comm_hang" and hang.seq == 5 and sorted(_ranks(hang)) == [0, 1, 2, 3]
    assert hang.evidence["behind_it"] == [{"pg": "0", "seq": 6, "waiting": [0, 1],
                                           "missing": [2, 3]}]


@pytest.mark.parametrize(("backend", "kinds"), [("nccl", ["comm_hang"]), ("xccl", ["comm_hang"]),
                                                ("ucc", []), ("gloo", [])])
def test_only_backends_known_to_report_completion_can_show_a_comm_hang(
        tmp_path: Path, backend: str, kinds: list) -> None:
    """Constructed to torch's format: every member recorded all_reduce #1 and #2, nothing ever
    left ``scheduled``. From NCCL (timing off) #1 is stuck; from a backend that never reports
    completion this is just what every healthy dump looks like."""
    recs = world(3, backend=backend, timing=False)
    _steps(recs, 2)
    for rec in recs:
        for e in rec.entries:
            e.update(state="scheduled", time_discovered_started_ns=None,
                     time_discovered_completed_ns=None)
    assert [r.kind for r in analyze_dumps(write(recs, tmp_path))] == kinds
