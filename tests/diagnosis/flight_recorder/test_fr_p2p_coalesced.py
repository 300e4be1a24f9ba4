"""Sends and receives, coalesced groups, and ring buffers that wrapped.

gloo on torch 2.13 records no send/recv and no coalesced group, and there is no NCCL here: these
dumps are constructed to torch's format (torch_format.py), counters included: p2p_seq_id counts
every send and receive of a rank on a group whatever the peer, so it differs between the two
ends of one transfer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from c4.report import FaultReport
from diagnosis.flight_recorder import analyze_dumps, load_dumps
from tests.diagnosis.flight_recorder.torch_format import GLOO_PG_CONFIG, Recorder, world, write


def _ranks(report: FaultReport) -> list[int]:
    return [s.rank for s in report.suspects]


def _pipeline(recs: list[Recorder], steps: int, pg: str = "0") -> None:
    """Each stage receives from the previous one and sends to the next (0 -> 1 -> ... -> n-1)."""
    for _ in range(steps):
        for rec in recs:
            if rec.rank > 0:
                rec.recv(pg, rec.rank - 1)
            if rec.rank < len(recs) - 1:
                rec.send(pg, rec.rank + 1)


def test_completed_pipeline_is_healthy_although_p2p_seq_ids_differ(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here)."""
    recs = world(4)
    _pipeline(recs, 5)
    dumps = load_dumps(write(recs, tmp_path))
    # the middle stages count receives and sends alike: their ends disagree on p2p_seq_id
    assert [e.p2p_seq for e in dumps[0].entries][-1] == 5
    assert [e.p2p_seq for e in dumps[1].entries][-1] == 10
    assert analyze_dumps(tmp_path) == []


@pytest.mark.parametrize("encoding", ["pickle", "json"])
def test_send_whose_recv_never_came_names_the_receiver(tmp_path: Path, encoding: str) -> None:
    """Constructed to torch's format (no NCCL here): after 3 steps rank 0 sends again, rank 1
    never posts the receive (stuck in compute), ranks 2 and 3 wait to receive from their
    predecessors. Matching by p2p_seq_id would pair rank 0's 4th send with rank 1's 4th p2p
    call, a completed send: the wrong call, and no culprit."""
    recs = world(4)
    _pipeline(recs, 3)
    recs[0].send("0", 1, state="started")
    recs[2].recv("0", 1, state="started")
    recs[3].recv("0", 2, state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path, encoding=encoding))
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [1, 2], hang.summary
    assert hang.top.score > 0.8 and hang.suspects[1].score < 0.5
    assert hang.summary.startswith("rank 1 never posted the recv matching the send rank 0 "
                                   "waits in (send to rank 1 on process group '0')")
    assert hang.pg == "0" and hang.seq == 4  # rank 0's p2p_seq_id of the open send
    stalled = {(c["op"], tuple(c["waiting"])): c for c in hang.evidence["stalled_calls"]}
    assert stalled[("recv", (2,))]["missing"] == [1]
    assert stalled[("recv", (3,))]["missing"] == [2]


def test_recv_whose_send_never_came_names_the_sender(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here), on a subgroup whose group-local ranks
    differ from the global ones: '1' is {2, 5}; rank 5 (local 1) waits for rank 2 (local 0)."""
    recs = world(6)
    for rec in (recs[2], recs[5]):
        rec.group("1", [2, 5], desc="pp")
    for _ in range(2):
        recs[2].send("1", 5)
        recs[5].recv("1", 2)
    recs[5].recv("1", 2, state="started")
    assert recs[5].entries[-1]["profiling_name"] == "nccl:recv 1<-0"
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert _ranks(hang) == [2] and hang.pg == "1"
    assert hang.summary.startswith("rank 2 never posted the send matching the recv rank 5 "
                                   "waits in (recv from rank 2 on process group '1')")


def test_both_ends_inside_a_transfer_that_never_finished_is_a_comm_hang(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here)."""
    recs = world(2)
    _pipeline(recs, 2)
    recs[0].send("0", 1, state="started")
    recs[1].recv("0", 0, state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "comm_hang" and sorted(_ranks(hang)) == [0, 1]
    assert "send from rank 0 to rank 1" in hang.summary and "never completed" in hang.summary


def test_send_and_recv_of_different_sizes_is_a_mismatch(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): both ends inside, different tensors."""
    recs = world(2)
    recs[0].send("0", 1, sizes=((8,),), state="started")
    recs[1].recv("0", 0, sizes=((16,),), state="started")
    (err,) = analyze_dumps(write(recs, tmp_path))
    assert err.kind == "error" and sorted(_ranks(err)) == [0, 1]
    assert "rank 0 sends tensor[8] Float to rank 1, which receives tensor[16] Float" in err.summary


def test_batched_send_recv_is_matched_through_its_closing_entry(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): ``batch_isend_irecv`` records each send or
    recv without events (they stay ``scheduled``) and the batch's state on the closing
    ``nccl:coalesced`` entry."""
    recs = world(3)
    recs[0].batch("0", [("send", 1), ("recv", 2)])
    recs[1].batch("0", [("recv", 0)])
    recs[2].batch("0", [("send", 0)])
    assert recs[0].entries[0]["state"] == "scheduled"
    assert analyze_dumps(write(recs, tmp_path / "ok")) == []
    # then rank 0 batches a send to rank 1 that rank 1 never receives
    recs[0].batch("0", [("send", 1)], state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path / "hang"))
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [1]


def test_coalesced_collectives_are_one_call(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): ``_coalescing_manager`` records each
    member without events (``scheduled`` forever) under one collective_seq_id, then the closing
    entry with the group's state."""
    recs = world(3)
    for _ in range(3):
        for rec in recs:
            rec.coalesced("0", [("all_reduce", ((16,),)), ("all_reduce", ((32,),))])
            rec.collective("0")
    assert analyze_dumps(write(recs, tmp_path / "ok")) == []
    # a group whose members differ on rank 1, and then a group rank 2 never enters
    for rec in recs:
        sizes = ((64,),) if rec.rank == 1 else ((32,),)
        rec.coalesced("0", [("all_reduce", ((16,),)), ("all_reduce", sizes)])
    for rec in recs[:2]:
        rec.coalesced("0", [("all_reduce", ((16,),))], state="started",
                      end="ALLGATHER_coalesced")
    reports = analyze_dumps(write(recs, tmp_path / "bad"))
    assert [r.kind for r in reports] == ["noncomm_hang", "error"], reports
    hang, err = reports
    assert _ranks(hang) == [2] and hang.seq == 8
    assert "ALLGATHER_coalesced #8" in hang.summary
    assert _ranks(err) == [1] and err.seq == 7
    assert "all_reduce[16] Float + all_reduce[64] Float + coalesced" in err.summary


def test_coalesced_group_all_entered_and_unfinished_is_one_comm_hang(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here)."""
    recs = world(2)
    for rec in recs:
        rec.coalesced("0", [("all_reduce", ((16,),)), ("broadcast", ((4,),))], state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "comm_hang" and hang.seq == 1 and "coalesced #1" in hang.summary


def test_wrapped_buffer_missing_old_calls_is_not_absence_gloo(tmp_path: Path) -> None:
    """Constructed to torch's gloo format (states stay ``scheduled``, pg_config unusable; gloo
    records collectives the same way): buffers of 8 entries. All ranks ran 10 all_reduces on
    the world group; ranks 2 and 3 then ran 12 calls on their group '1', so their buffers hold
    nothing of the world group any more, while ranks 0 and 1 still hold its last 8 calls."""
    recs = world(4, backend="gloo", max_entries=8, timing=False)
    for rec in recs[2:]:
        rec.group("1", [2, 3])
    for _ in range(10):
        for rec in recs:
            rec.collective("0", state="scheduled")
    for _ in range(12):
        for rec in recs[2:]:
            rec.collective("1", state="scheduled")
    dumps = load_dumps(write(recs, tmp_path / "ok", pg_config=GLOO_PG_CONFIG))
    assert {e.pg for e in dumps[3].entries} == {"1"} and dumps[0].entries[0].seq == 3
    assert analyze_dumps(tmp_path / "ok") == []
    # now ranks 0 and 1 call all_reduce #11; ranks 2 and 3 never do
    for rec in recs[:2]:
        rec.collective("0", state="scheduled")
    (hang,) = analyze_dumps(write(recs, tmp_path / "hang", pg_config=GLOO_PG_CONFIG))
    assert _ranks(hang) == [2, 3] and hang.seq == 11, hang.summary


def test_wrapped_buffer_cutting_a_coalesced_group_is_not_a_mismatch(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): buffers of 5 entries; each step is a
    coalesced group of two all_reduces (3 entries). Rank 1 made one extra call on another group
    before the last step, so its buffer keeps only the closing entry of the second group, while
    rank 0's keeps that group's second member too."""
    recs = world(2, max_entries=5)
    recs[1].group("1", [1])
    for step in range(3):
        if step == 2:
            recs[1].collective("1")
        for rec in recs:
            rec.coalesced("0", [("all_reduce", ((16,),)), ("all_reduce", ((32,),))])
    dumps = load_dumps(write(recs, tmp_path))
    assert [(e.op, e.seq) for e in dumps[0].entries][:2] == [("all_reduce", 2), ("coalesced", 2)]
    assert [(e.op, e.pg) for e in dumps[1].entries][:2] == [("coalesced", "0"),
                                                            ("all_reduce", "1")]
    assert analyze_dumps(tmp_path) == []


def test_wrapped_pipeline_buffers_still_match_open_transfers(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): buffers of 6 entries after 50 steps, so
    neither end of a pair holds its history; the open transfers are still matched."""
    recs = world(3, max_entries=6)
    _pipeline(recs, 50)
    recs[0].send("0", 1, state="started")
    recs[2].recv("0", 1, state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert _ranks(hang) == [1], hang.summary


def test_ranks_inside_a_stuck_transfer_are_not_a_circular_wait(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): rank 0 waits in all_reduce #3; ranks 1
    and 2 never came because both are inside a send from 1 to 2 that never finishes. That is
    one stuck transfer (comm_hang), not two ranks waiting on each other."""
    recs = world(3)
    for _ in range(2):
        for rec in recs:
            rec.collective("0")
    recs[0].collective("0", state="started")
    recs[1].send("0", 2, state="started")
    recs[2].recv("0", 1, state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "comm_hang" and sorted(_ranks(hang)) == [1, 2], hang.summary
    assert hang.evidence["behind_it"] == [{"pg": "0", "seq": 3, "waiting": [0],
                                           "missing": [1, 2]}]
    assert "rank 0 waits behind it in all_reduce #3" in hang.summary


def test_receiver_whose_gpu_never_started_the_recv_is_the_culprit(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here), timing on: rank 0's send started, rank
    1 posted the receive but its stream never began it."""
    recs = world(2)
    _pipeline(recs, 2)
    recs[0].send("0", 1, state="started")
    recs[1].recv("0", 0, state="scheduled")
    (hang,) = analyze_dumps(write(recs, tmp_path))
    assert hang.kind == "noncomm_hang" and _ranks(hang) == [1]
    assert hang.summary.startswith("rank 1 entered recv from rank 0 on process group '0' but "
                                   "its GPU never started it while rank 0 waits inside")


def test_stage_without_a_dump_is_the_undumped_culprit_of_both_neighbours(tmp_path: Path) -> None:
    """Constructed to torch's format (no NCCL here): stage 1 of 3 crashed without a dump;
    stage 0 waits to send to it and stage 2 to receive from it."""
    recs = world(3)
    _pipeline(recs, 3)
    recs[0].send("0", 1, state="started")
    recs[2].recv("0", 1, state="started")
    (hang,) = analyze_dumps(write(recs, tmp_path, skip=(1,)))
    assert _ranks(hang) == [1] and hang.top.score == pytest.approx(0.8)
    assert hang.evidence["no_dump"] == [1] and "rank 1 left no dump" in hang.summary
    assert sorted(c["waiting"][0] for c in hang.evidence["stalled_calls"]) == [0, 2]
