"""Finding culprits in Flight Recorder dumps: the real gloo fixture, then dumps in the same
format (2.10 field set) shaped to each case the analyzer must get right."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from c4.report import FaultReport, reports_to_json
from diagnosis.flight_recorder import analyze, analyze_dumps
from diagnosis.flight_recorder.dumps import parse_dump

FIXTURE = Path(__file__).parent / "fixtures" / "gloo_hang_4ranks"


def _ranks(report: FaultReport) -> list[int]:
    return [s.rank for s in report.suspects]


@pytest.mark.parametrize("encoding", ["pickle", "json"])
def test_real_gloo_hang_names_the_rank_that_never_came(encoding: str) -> None:
    (hang,) = analyze_dumps(FIXTURE / encoding)
    assert hang.kind == "noncomm_hang"
    assert _ranks(hang) == [3, 2]  # rank 3 is the culprit, rank 2 waits for it in group '1'
    assert hang.top.type == "rank" and hang.top.id == "3" and hang.top.score > 0.8
    assert hang.suspects[1].score < 0.5
    assert (hang.pg, hang.seq) == ("0", 3)
    assert "rank 3 never joined all_reduce #3 on process group '0'" in hang.summary
    stalled = {(c["pg"], c["seq"]): c for c in hang.evidence["stalled_calls"]}
    assert stalled[("0", 3)]["waiting"] == [0, 1] and stalled[("0", 3)]["missing"] == [2, 3]
    assert stalled[("1", 1)]["inferred"] is True
    assert hang.evidence["blocked_in"] == {"2": {"pg": "1", "seq": 1}}
    assert hang.first_seen_ns > 1_600_000_000 * 10**9
    # the whole report is the JSON of shared specs section 3
    doc = json.loads(json.dumps(reports_to_json([hang])))
    assert FaultReport.from_json(doc["reports"][0]).suspects == hang.suspects


def _fixture_dumps() -> list[dict]:
    return [pickle.loads((FIXTURE / "pickle" / f"nccl_trace_rank_{r}").read_bytes())
            for r in range(4)]


def test_a_rank_gap_without_a_dump_is_suspected() -> None:
    # Keep only ranks 0 and 2 of the fixture: rank 1 is a gap in the default group and never
    # joined; rank 2 (blocked in group '1') waits behind; rank 3 is invisible.
    dumps = _fixture_dumps()
    (hang,) = analyze([parse_dump(dumps[r], r, f"r{r}") for r in (0, 2)])
    assert _ranks(hang) == [1, 2] and hang.evidence["no_dump"] == [1]
    assert "left no dump" in hang.summary


# ---- dumps in the 2.10 field set, shaped per case ----------------------------------------------

def _e(pg: str, seq: int, op: str = "all_reduce", sizes=((16,),), state: str = "scheduled",
       out=None, t: int = 0, backend: str = "gloo", desc: str | None = None,
       p2p: bool = False) -> dict:
    return {"record_id": 0, "pg_id": 0, "process_group": (pg, desc or (
        "default_pg" if pg == "0" else "undefined")), "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0, "profiling_name": f"{backend}:{op}",
        "time_created_ns": 1_000 + t, "input_sizes": [list(s) for s in sizes],
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": [list(s) for s in (out if out is not None else sizes)],
        "output_dtypes": ["Float"] * len(out if out is not None else sizes), "state": state,
        "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
        "retired": False, "timeout_ms": 3000, "is_p2p": p2p}


def _job(per_rank: dict[int, list[dict]], pg_config: dict | None = None) -> list[FaultReport]:
    dumps = []
    for rank, entries in per_rank.items():
        for i, e in enumerate(entries):
            e["record_id"] = i
        obj = {"version": "2.10", "entries": entries,
               "pg_config": pg_config or {"": {"name": "", "desc": "", "ranks": "[]"}},
               "pg_status": {}}
        dumps.append(parse_dump(obj, rank, f"rank_{rank}"))
    return analyze(dumps)


def _steps(n: int, pg: str = "0", start: int = 1) -> list[dict]:
    return [_e(pg, s, t=s) for s in range(start, start + n)]


def test_healthy_job_has_no_reports() -> None:
    assert _job({r: _steps(5) for r in range(4)}) == []


def test_lagging_rank_is_the_culprit_of_the_earliest_stalled_call() -> None:
    (hang,) = _job({0: _steps(7), 1: _steps(7), 2: _steps(4), 3: _steps(7)})
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [2]
    assert (hang.pg, hang.seq) == ("0", 5)
    assert "last_call" in hang.evidence and hang.evidence["last_call"]["2"].startswith(
        "all_reduce #4")


def test_ring_buffer_eviction_is_not_absence() -> None:
    # rank 1's buffer kept only its last calls: it still reached every seq the others did
    assert _job({0: _steps(10), 1: _steps(3, start=8), 2: _steps(10)}) == []


def test_circular_wait_blames_both() -> None:
    # groups '1' = {0, 1} and '2' = {0, 1}: rank 0 calls on '1' first, rank 1 on '2' first
    base = _steps(2)
    (hang,) = _job({0: [*base, _e("1", 1, t=10)], 1: [*base, _e("2", 1, t=11)]},
                   pg_config={"1": {"ranks": "[0, 1]"}, "2": {"ranks": "[0, 1]"}})
    assert hang.kind == "noncomm_hang" and sorted(_ranks(hang)) == [0, 1]
    assert hang.evidence["circular_wait"] is True and "circular wait" in hang.summary


def test_named_pg_config_adds_members_that_never_called() -> None:
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
           "1": {"name": "1", "desc": "tp", "ranks": "[1, 2]"}}
    (hang,) = _job({0: _steps(2), 1: [*_steps(2), _e("1", 1, t=5)], 2: _steps(2)}, cfg)
    assert _ranks(hang) == [2] and (hang.pg, hang.seq) == ("1", 1)


def test_pg_config_contradicted_by_entries_is_ignored() -> None:
    cfg = {"1": {"name": "1", "desc": "", "ranks": "[1, 2]"}}  # rank 0 also calls on '1'
    reports = _job({r: [*_steps(2), _e("1", 1, t=5)] for r in range(3)}, cfg)
    assert reports == []


def test_undumped_rank_in_pg_config_is_suspected() -> None:
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
    (hang,) = _job({0: _steps(3), 1: _steps(3), 2: _steps(3)}, cfg)
    assert _ranks(hang) == [3] and hang.evidence["no_dump"] == [3]
    assert hang.top.score == pytest.approx(0.8)


def test_mismatch_blames_the_minority_even_when_it_is_rank_0() -> None:
    odd = _e("0", 3, "all_gather", out=((3, 16),), t=3)
    (err,) = _job({0: [*_steps(2), odd], 1: _steps(3), 2: _steps(3)})
    assert err.kind == "error" and _ranks(err) == [0] and (err.pg, err.seq) == ("0", 3)
    assert err.evidence["majority"] == "all_reduce[16] Float"
    assert "rank 0 called all_gather[16->3x16] Float where ranks 1, 2 called" in err.summary


def test_size_mismatch_and_later_shifted_calls_give_one_report() -> None:
    # rank 2 all_reduces 32 elements at seq 2, then calls one collective more than the others
    r2 = [_e("0", 1), _e("0", 2, sizes=((32,),)), _e("0", 3, "barrier", sizes=()),
          _e("0", 4), _e("0", 5)]
    others = [_e("0", 1), _e("0", 2), _e("0", 3), _e("0", 4, "broadcast"), _e("0", 5)]
    reports = _job({0: others, 1: [dict(e) for e in others], 2: r2,
                    3: [dict(e) for e in others]})
    (err,) = reports
    assert _ranks(err) == [2] and err.seq == 2
    assert err.evidence["later_mismatched_calls"] == 2
    assert "all_reduce[32]" in err.summary


def test_tie_names_every_rank_with_equal_scores() -> None:
    (err,) = _job({0: [_e("0", 1)], 1: [_e("0", 1, "broadcast")]})
    assert sorted(_ranks(err)) == [0, 1] and {s.score for s in err.suspects} == {0.5}
    assert err.evidence["majority"] is None and "no majority" in err.summary


def test_asymmetric_calls_are_not_mismatches() -> None:
    gather_root = _e("0", 1, "gather", out=((16,), (16,), (16,)))
    gather_leaf = _e("0", 1, "gather", out=())
    a2a = [_e("0", 2, "all_to_all_single", sizes=((n,),)) for n in (8, 16, 24)]
    assert _job({0: [gather_root, a2a[0]], 1: [gather_leaf, a2a[1]],
                 2: [dict(gather_leaf), a2a[2]]}) == []


def test_p2p_entries_are_not_matched_as_collectives() -> None:
    send = _e("0", 1, "send 0->1", p2p=True)
    recv = _e("0", 1, "recv 1<-0", p2p=True)
    assert _job({0: [*_steps(2), send], 1: [*_steps(2), recv]}) == []


def test_nccl_states_completed_calls_are_not_stalls_and_started_ones_are_comm_hangs() -> None:
    def nccl(seq: int, state: str) -> dict:
        return _e("0", seq, state=state, backend="nccl", t=seq)

    # dumps taken a moment apart: rank 1 already completed a call rank 0 has not issued yet
    assert _job({0: [nccl(1, "completed")],
                 1: [nccl(1, "completed"), nccl(2, "completed")]}) == []
    (hang,) = _job({r: [nccl(1, "completed"), nccl(2, "started")] for r in range(3)})
    assert hang.kind == "comm_hang" and sorted(_ranks(hang)) == [0, 1, 2]
    assert (hang.pg, hang.seq) == ("0", 2) and "never completed" in hang.summary


def test_failed_states_are_reported() -> None:
    reports = _job({0: [_e("0", 1, state="timeout")], 1: [_e("0", 1)]})
    (err,) = [r for r in reports if r.kind == "error"]
    assert _ranks(err) == [0] and err.evidence["states"] == {"0": "timeout"}


def test_pipeline_receive_makes_a_victim_not_a_culprit() -> None:
    # NCCL: ranks 0, 1 wait in all_reduce #5; rank 2 never came because it waits to receive
    # from rank 3 (a pipeline stage); rank 3 finished all it issued and went quiet.
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}

    def done(n: int) -> list[dict]:
        return [_e("0", s, state="completed", backend="nccl", t=s) for s in range(1, n + 1)]

    stuck = _e("0", 5, state="started", backend="nccl", t=50)
    recv = _e("0", 7, "recv 2<-3", state="started", backend="nccl", t=45, p2p=True)
    (hang,) = _job({0: [*done(4), stuck], 1: [*done(4), dict(stuck)], 2: [*done(4), recv],
                    3: done(4)}, cfg)
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [3, 2]
    assert hang.top.score > 0.8 and hang.suspects[1].score < 0.5
    # the receive is matched against rank 3's sends (it has none open), so the report leads
    # with the transfer rank 3 owes; ranks 0, 1 wait behind it
    assert ("rank 3 never posted the send matching the recv rank 2 waits in (recv from rank 3 "
            "on process group '0')") in hang.summary
    assert "ranks 0, 1 wait behind in all_reduce #5" in hang.summary
    # without the receive on record, rank 2 is as much a suspect as rank 3
    (hang,) = _job({0: [*done(4), stuck], 1: [*done(4), dict(stuck)], 2: done(4),
                    3: done(4)}, cfg)
    assert sorted(_ranks(hang)) == [2, 3] and {s.score for s in hang.suspects} == {0.9}
