"""Hang and error culprits on hand-built jobs shaped like the lab's failures (see the lab fixtures'
README): rows that arrive late, ranks stopped by an error, frozen ranks whose last rows never left,
a stop of the whole job."""

from __future__ import annotations

from functools import partial

from diagnosis.engine import Engine, EngineConfig
from diagnosis.engine.hangs import scan_open
from tests.support.engine_builders import OpRow, advance_quietly, op_columns, op_row

MS = 1_000_000
ERROR = 2
STRINGS = ["a", "b", "c", "all_reduce", ""]     # pg names, op name, dtype
A, B, C, OP, DT = range(5)
_cols = partial(op_columns, STRINGS)


def _row(rank: int, pg: int, seq: int, enter: int, end: int, status: int = 0) -> OpRow:
    return op_row(rank, seq, enter, end, pg=pg, op=OP, dtype=DT, status=status)


def _engine(ranks: int, evidence_ns: int = 3_000 * MS) -> Engine:
    """Hang bounds of 100 ms; ``evidence_ns``: how late rows may arrive (a culprit of a hang
    waits nowhere only after that long)."""
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS, evidence_delay_ns=evidence_ns))
    for r in range(ranks):
        eng.add_rank(r, f"h{r // 2}", f"h{r // 2}/gpu{r % 2}")
    return eng


def _ids(reports, kind):
    return [(r.id, r.state) for r in reports if r.kind == kind]


def test_error_names_the_absent_member_not_a_host_mate_whose_failed_row_came_late():
    # ranks 0-3 in "a", ranks 1 and 4 in "b"; rank 3 dies at step 20: 0, 1 and 2 fail a #20
    # without it, but rank 2's row (host-mate of 3, failed first) arrives after the others'
    eng = _engine(5)
    eng.add_group("a", [0, 1, 2, 3])
    eng.add_group("b", [1, 4])
    t = 0
    out = []
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r, t + 2 * MS) for r in range(4)]
                          + [_row(r, B, seq, t + 3 * MS, t + 4 * MS) for r in (1, 4)]))
        out += eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([_row(r, A, 20, t, t + 5 * MS, ERROR) for r in (0, 1)]
                      + [_row(4, B, 20, t + 3 * MS, -1)]))
    out += eng.advance(t + 10 * MS)
    eng.add_ops(_cols([_row(2, A, 20, t, t + 4 * MS, ERROR)]))
    out += eng.advance(t + 20 * MS)
    # rank 4 fails b #20 (rank 1, a victim of the error, never came) while the job goes on:
    # no teardown
    eng.add_ops(_cols([_row(4, B, 20, t + 3 * MS, t + 80 * MS, ERROR)]))
    for k in range(1, 30):
        out += eng.advance(t + k * 10 * MS)
    out += eng.finish(t + 3_000 * MS)
    errors = {r.id for r in out if r.kind == "error"}
    assert errors == {"error:3"}, [r.summary for r in out]
    report = next(r for r in out if r.id == "error:3")
    assert report.suspects[0].rank == 3 and report.evidence["culprits"] == [3]
    assert not [r for r in out if r.kind == "noncomm_hang" and r.state == "open"
                and eng.reporter.get(r.id).state == "open"]


def test_hang_on_a_rank_whose_error_rows_come_later_is_withdrawn_by_the_error():
    # as above, but ranks 0-2's failed rows of a #20 arrive only after rank 4 has waited in
    # b #20 past its bound: a noncomm_hang names rank 1, then the error explains it while rank
    # 4 still waits; ranks 5 and 6 (group "c") go on all along
    eng = _engine(7, evidence_ns=100 * MS)
    eng.add_group("a", [0, 1, 2, 3])
    eng.add_group("b", [1, 4])
    eng.add_group("c", [5, 6])
    t = 0
    out = []
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r, t + 2 * MS) for r in range(4)]
                          + [_row(r, B, seq, t + 3 * MS, t + 4 * MS) for r in (1, 4)]
                          + [_row(r, C, seq, t, t + MS) for r in (5, 6)]))
        out += eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([_row(4, B, 20, t + 3 * MS, -1)]))
    for k in range(1, 50):
        eng.add_ops(_cols([_row(r, C, 20 + k, t + k * 10 * MS, t + k * 10 * MS + MS)
                           for r in (5, 6)]))
        out += eng.advance(t + k * 10 * MS)
    hangs = [r for r in out if r.kind == "noncomm_hang"]
    assert hangs and hangs[-1].evidence["culprits"] == [1]
    fid = hangs[-1].id
    eng.add_ops(_cols([_row(r, A, 20, t + r, t + 5 * MS, ERROR) for r in range(3)]))
    for k in range(50, 60):
        eng.add_ops(_cols([_row(r, C, 20 + k, t + k * 10 * MS, t + k * 10 * MS + MS)
                           for r in (5, 6)]))
        out += eng.advance(t + k * 10 * MS)
    assert eng.reporter.get(fid).state == "resolved"
    assert eng.reporter.get(fid).evidence["resolved"] == "explained by an error report"
    out += eng.finish(t + 3_000 * MS)
    assert {r.id for r in out if r.kind == "error"} == {"error:3"}
    assert [r.id for r in eng.finish() if r.kind == "noncomm_hang"] == []


def test_frozen_rank_whose_last_rows_never_left_is_named():
    # rank 3's last shipped row is a #20, open, which ranks 0-2 finished; they then complete
    # b #20 with no row from rank 3 (it took part: its rows stayed in its frozen collector) and
    # wait in a #21, which rank 3 never enters
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    eng.add_group("b", [0, 1, 2, 3])
    t = 0
    out = []
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r, t + 2 * MS) for r in range(4)]
                          + [_row(r, B, seq, t + 3 * MS, t + 4 * MS) for r in range(4)]))
        out += eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([_row(r, A, 20, t + r, t + 2 * MS) for r in range(3)]
                      + [_row(3, A, 20, t + 3, -1)]
                      + [_row(r, B, 20, t + 3 * MS, t + 4 * MS) for r in range(3)]
                      + [_row(r, A, 21, t + 5 * MS, -1) for r in range(3)]))
    for k in range(1, 80):      # past the 3 s that rows showing rank 3 elsewhere could take
        out += eng.advance(t + k * 50 * MS)
    hangs = [r for r in out if r.kind == "noncomm_hang"]
    assert hangs, [r.summary for r in out]
    assert all(r.evidence["culprits"] == [3] for r in hangs)
    last = eng.reporter.get(hangs[-1].id)
    assert last.state == "open" and last.seq == 21 and last.suspects[0].rank == 3
    assert "never entered all_reduce #21" in last.summary


def test_open_row_of_a_rank_its_peers_wait_for_inside_the_call_is_no_move():
    # the same open row, but ranks 0-2 never completed a collective without rank 3 (they wait
    # for it in b #20): rank 3 is inside a #20 as far as anyone can tell, and not named absent
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    eng.add_group("b", [0, 1, 2, 3])
    t = 0
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r, t + 2 * MS) for r in range(4)]
                          + [_row(r, B, seq, t + 3 * MS, t + 4 * MS) for r in range(4)]))
        eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([_row(r, A, 20, t + r, t + 2 * MS) for r in range(3)]
                      + [_row(3, A, 20, t + 3, -1)]
                      + [_row(r, B, 20, t + 3 * MS, -1) for r in range(3)]))
    for k in range(1, 40):
        eng.advance(t + k * 50 * MS)
    scan = scan_open(eng.arena, eng.timing.bound, t + 2_000 * MS, eng.hangs._symmetric())
    assert scan.moved_on == set() and 3 in scan.waiting


def _stop_job(after_last_entry_ms: float, rank3_enters: bool = True, leaving: bool = False):
    """Ranks 0-3 run a (all_reduce, ~2 ms once all are in) then b, 20 times; then all enter a
    #20, ranks 0 and 1 also b #20 (a is asynchronous for them), and every rank goes silent.
    ``after_last_entry_ms``: when ranks 0 and 1 enter b #20, after a #20's last entry."""
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    eng.add_group("b", [0, 1, 2, 3])
    t = 0
    out = []
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r * MS // 2, t + 4 * MS) for r in range(4)]
                          + [_row(r, B, seq, t + 5 * MS, t + 6 * MS) for r in range(4)]))
        out += eng.advance(t)
    t += 20 * MS
    last = t + 3 * MS // 2
    b_at = last + int(after_last_entry_ms * MS)
    eng.add_ops(_cols([_row(r, A, 20, t + r * MS // 2, -1) for r in range(4 if rank3_enters
                                                                          else 3)]
                      + [_row(r, B, 20, b_at, -1) for r in (0, 1)]))
    if leaving:  # every collector's last words: its process is exiting
        eng.heard(range(4), b_at + MS, leaving=True)
    for k in range(1, 60):
        out += eng.advance(t + k * 100 * MS)
    return eng, out


def test_stop_of_the_whole_job_inside_its_calls_files_no_hang():
    # every rank went silent within 2 ms, inside a call, right as a #20 got its last member:
    # nothing says a #20 is stuck; a stop of the whole job (SIGTERM) explains the silence
    eng, out = _stop_job(after_last_entry_ms=0.2)
    assert not [r for r in out if r.kind in ("noncomm_hang", "comm_hang", "error")], \
        [r.summary for r in out]
    assert {r.kind for r in eng.teardown.dropped} >= {"comm_hang"}


def test_job_that_ran_on_after_the_stuck_call_should_have_finished_is_a_comm_hang():
    # the same, but ranks 0 and 1 were still running 20 ms after a #20 had everyone (it
    # normally finishes 2.5 ms after its last member comes): a #20 is stuck
    _, out = _stop_job(after_last_entry_ms=20)
    assert "comm_hang" in {r.kind for r in out}


def test_rank_out_of_any_call_when_the_job_went_silent_is_named():
    # rank 3 never entered a #20 (it is out of any call): a hang on it, however close together
    # the others went silent
    _, out = _stop_job(after_last_entry_ms=0.2, rank3_enters=False)
    hangs = [r for r in out if r.kind == "noncomm_hang"]
    assert hangs and hangs[-1].evidence["culprits"] == [3]


def test_ranks_that_all_said_they_are_exiting_file_no_hang():
    # the two cases above that are hangs on op records alone, but every rank's collector said
    # in its last words that its process is exiting: the job was stopped, nothing hangs
    for kwargs in ({"after_last_entry_ms": 20}, {"after_last_entry_ms": 0.2,
                                                 "rank3_enters": False}):
        _, out = _stop_job(leaving=True, **kwargs)
        assert not [r for r in out if r.kind in ("noncomm_hang", "comm_hang", "error")], \
            [r.summary for r in out]


def test_one_rank_exiting_does_not_hide_the_hang_it_causes():
    # rank 3 alone leaves (killed by SIGTERM before a #20): the others wait for it, a hang
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    t, out = 0, []
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r * MS // 2, t + 4 * MS) for r in range(4)]))
        out += eng.advance(t)
    t += 20 * MS
    eng.add_ops(_cols([_row(r, A, 20, t, -1) for r in range(3)]))
    eng.heard([3], t - 10 * MS, leaving=True)
    for k in range(1, 60):
        out += eng.advance(t + k * 100 * MS)
    hangs = [r for r in out if r.kind == "noncomm_hang"]
    assert hangs and hangs[-1].evidence["culprits"] == [3]


def _frozen_pair(heartbeats: bool):
    """Ranks 2 and 3 (one host) are both in c #20, which ranks 4 and 5 finished; rank 3 froze
    there and rank 2 waits for it inside the call; ranks 0, 1, 4, 5 then wait in a #21 for both.
    ``heartbeats``: every rank but the frozen one is heard each second (collector stats)."""
    eng = _engine(6)
    eng.add_group("a", [0, 1, 2, 3, 4, 5])
    eng.add_group("c", [2, 3, 4, 5])
    t = 0
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r * 100, t + 4 * MS) for r in range(6)]
                          + [_row(r, C, seq, t + 5 * MS, t + 6 * MS) for r in range(2, 6)]))
        eng.advance(t)
    t += 20 * MS
    eng.add_ops(_cols([_row(r, A, 20, t + r * 100, t + 4 * MS) for r in range(6)]
                      + [_row(2, C, 20, t + 5 * MS, -1), _row(3, C, 20, t + 5 * MS + 300, -1)]
                      + [_row(r, C, 20, t + 5 * MS, t + 6 * MS) for r in (4, 5)]
                      + [_row(r, A, 21, t + 8 * MS, -1) for r in (0, 1, 4, 5)]))
    out = advance_quietly(eng, t, 79, heard=[0, 1, 2, 4, 5] if heartbeats else ())
    return [r for r in out if r.kind == "noncomm_hang"]


def test_frozen_rank_and_its_blocked_host_mate_tie_on_op_records():
    # both fell silent in the same call: op records cannot tell them apart; the tie goes to
    # rank 2, which came 0.3 ms earlier (the lab's demo_frozen_rank3 replay, still xfail)
    hangs = _frozen_pair(heartbeats=False)
    assert hangs and {tuple(r.evidence["culprits"]) for r in hangs} == {(2,)}


def test_stats_heartbeats_tell_the_frozen_rank_from_its_blocked_host_mate():
    # the first report (before any stats frame) names the tie; the next heartbeat, which rank
    # 2 sends and rank 3 does not, moves it to rank 3 and withdraws the one on rank 2
    hangs = _frozen_pair(heartbeats=True)
    assert hangs[-1].evidence["culprits"] == [3] and hangs[-1].state == "open"
    assert hangs[-1].suspects[0].id == "h1/gpu1"
    assert [r.state for r in hangs if r.id == "noncomm_hang:2"][-1] == "resolved"


def test_a_crash_is_filed_when_the_others_signs_of_life_arrive_late():
    # rank 3 dies: 0, 1 and 2 fail a #20 without it. Their next signs of life (collector stats,
    # about one a second) reach the engine only after the communicator's grace has passed: the
    # error waits for them instead of being taken for a teardown of the whole job
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    t = 0
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r, t + 2 * MS) for r in range(4)]))
        eng.advance(t)
    t += 20 * MS
    eng.add_ops(_cols([_row(r, A, 20, t, t + 5 * MS, ERROR) for r in range(3)]))
    out = []
    for k in range(1, 10):                  # 0.9 s of silence: well past the 0.1 s grace
        out += eng.advance(t + k * 100 * MS)
    eng.heard([0, 1, 2], t + 800 * MS)     # sent 0.8 s after the failure, arrived late
    for k in range(10, 60):
        out += eng.advance(t + k * 100 * MS)
    errors = [r for r in out if r.kind == "error"]
    assert errors and errors[-1].evidence["culprits"] == [3] and errors[-1].state == "open"


def test_a_rank_whose_open_row_elsewhere_arrives_late_is_not_the_culprit():
    # ranks 0-2 in "a", ranks 2 and 3 in "b"; rank 3 freezes. Rank 2 enters b #20 and waits
    # for it, but its open row is shipped only 1.5 s later (collectors ship a pending call
    # after a while, sidecars batch); meanwhile ranks 0 and 1 wait in a #20 for rank 2.
    # Before that row, rank 2 looked like a rank that waits nowhere: only rank 3 is named.
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2])
    eng.add_group("b", [2, 3])
    t = 0
    out = []
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([_row(r, B, seq, t, t + 2 * MS) for r in (2, 3)]
                          + [_row(r, A, seq, t + 3 * MS, t + 4 * MS) for r in range(3)]))
        out += eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([_row(r, A, 20, t + 3 * MS, -1) for r in (0, 1)]))
    for k in range(1, 16):
        out += eng.advance(t + k * 100 * MS)
    eng.add_ops(_cols([_row(2, B, 20, t, -1)]))
    for k in range(16, 80):
        out += eng.advance(t + k * 100 * MS)
    hangs = [r for r in out if r.kind == "noncomm_hang"]
    assert hangs, [r.summary for r in out]
    assert all(r.evidence["culprits"] == [3] for r in hangs), [r.summary for r in hangs]


def _steady_four() -> tuple[Engine, int]:
    """Ranks 0-3 (two hosts) in "a" after 20 healthy all_reduces of 4 ms every 20 ms; the
    time for the next."""
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    t = 0
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r * 100, t + 4 * MS) for r in range(4)]))
        eng.advance(t)
    return eng, t + 20 * MS


def _frozen_inside_all_entered(heard: list[int]):
    """Ranks 0-3 (two hosts) all entered a #20, a ring all_reduce none of them got out of:
    each waits for data. ``heard``: the ranks whose collectors go on sending stats frames
    each second."""
    eng, t = _steady_four()
    eng.add_ops(_cols([_row(r, A, 20, t + r * 100, -1) for r in range(4)]))
    out = advance_quietly(eng, t, 99, heard=heard)
    return [r for r in out if r.kind in ("noncomm_hang", "comm_hang")]


def test_rank_frozen_inside_a_call_nobody_got_out_of_is_named_by_its_silence():
    # rank 2 stopped inside the call (SIGSTOP): its host-mate 3 and ranks 0, 1 are heard on;
    # the call's timings alone look like a stuck transfer, the silence names the process
    hangs = _frozen_inside_all_entered(heard=[0, 1, 3])
    assert hangs[-1].kind == "noncomm_hang" and hangs[-1].state == "open", \
        [(r.kind, r.summary) for r in hangs]
    assert hangs[-1].evidence["culprits"] == [2]
    assert hangs[-1].suspects[0].id == "h1/gpu0"


def test_all_ranks_heard_inside_a_call_nobody_got_out_of_is_a_comm_hang():
    hangs = _frozen_inside_all_entered(heard=[0, 1, 2, 3])
    assert hangs and {r.kind for r in hangs} == {"comm_hang"}


def test_a_whole_host_falling_silent_inside_the_call_is_not_taken_for_a_frozen_process():
    # ranks 2 and 3 (host h1) both silent: the node may be cut off (its link is a suspect), so
    # the hang stays a communication hang
    hangs = _frozen_inside_all_entered(heard=[0, 1])
    assert hangs and {r.kind for r in hangs} == {"comm_hang"}


def _gpu_queue(stop_at: int | None):
    """Ranks 0-3 on GPUs: their CPUs enqueue 60 all_reduces within 6 ms (the collectors ship
    them as open rows), which their streams then run one per 25 ms, each completed row
    carrying the stream's times. ``stop_at``: the call at which the streams stop (a GPU hang)."""
    eng = _engine(4)
    eng.add_group("a", [0, 1, 2, 3])
    t = 0
    for seq in range(20):               # history: calls of 20 ms every 25 ms
        t += 25 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r * 100, t + 20 * MS) for r in range(4)]))
        eng.advance(t)
    t += 25 * MS
    eng.add_ops(_cols([_row(r, A, seq, t + (seq - 20) * 100_000 + r * 100, -1)
                       for seq in range(20, 80) for r in range(4)]))
    out = []
    for k in range(1, 100):
        now = t + k * 25 * MS
        seq = 19 + k
        if seq < 80 and (stop_at is None or seq < stop_at):
            eng.add_ops(_cols([_row(r, A, seq, now - 20 * MS, now) for r in range(4)]))
        out += eng.advance(now)
    return [r for r in out if r.kind in ("noncomm_hang", "comm_hang")]


def test_calls_queued_on_the_gpu_behind_running_ones_are_no_hang():
    # the 60th call was entered (by the CPU) 1.5 s before it ran: it waited behind the others
    assert _gpu_queue(stop_at=None) == []


def test_a_gpu_queue_that_stops_moving_is_a_hang():
    hangs = _gpu_queue(stop_at=40)
    assert hangs and hangs[0].seq == 40, [(r.kind, r.seq, r.summary) for r in hangs]


def test_a_frozen_rank_is_one_incident_not_a_hang_and_an_error():
    # rank 2 froze right after a #20 that its peers completed (its row never left): it
    # "stopped reporting" there, and its peers then wait for it in a #21. One incident: the hang,
    # and no error filed even for the moment before the hang is sure
    eng, t = _steady_four()
    eng.add_ops(_cols([_row(r, A, 20, t + r * 100, t + 4 * MS) for r in (0, 1, 3)]
                      + [_row(r, A, 21, t + 20 * MS, -1) for r in (0, 1, 3)]))
    out = advance_quietly(eng, t, 99, heard=[0, 1, 3], every=1)
    latest = {r.id: r for r in out}
    open_ = [r for r in latest.values() if r.state == "open"]
    assert [(r.kind, r.evidence["culprits"]) for r in open_] == [("noncomm_hang", [2])], \
        [(r.kind, r.state, r.summary) for r in latest.values()]
    assert not [r for r in out if r.kind == "error"], [(r.id, r.state) for r in out]



def test_a_call_queued_behind_a_hang_is_not_a_stuck_transfer():
    # ranks 0-3 in "a", pairs {0,1} in "b" and {2,3} in "c"; each round is a #i then the pair
    # call. Rank 3 stops before a #20; ranks 0-2 wait in a #20, and ranks 0 and 1 are also
    # inside b #20 (their CPUs launched it behind a #20, as NCCL's do, and RAS counts
    # launches): rank 3 is the culprit, and b #20 is no stuck transfer
    eng = _engine(4, evidence_ns=100 * MS)
    eng.add_group("a", [0, 1, 2, 3])
    eng.add_group("b", [0, 1])
    eng.add_group("c", [2, 3])
    t = 0
    out = []
    for seq in range(20):
        t += 10 * MS
        eng.add_ops(_cols([_row(r, A, seq, t + r, t + 2 * MS) for r in range(4)]
                          + [_row(r, B, seq, t + 3 * MS, t + 4 * MS) for r in (0, 1)]
                          + [_row(r, C, seq, t + 3 * MS, t + 4 * MS) for r in (2, 3)]))
        out += eng.advance(t)
    t += 10 * MS
    eng.add_ops(_cols([_row(r, A, 20, t, -1) for r in (0, 1, 2)]
                      + [_row(r, B, 20, t + 1 * MS, -1) for r in (0, 1)]
                      + [_row(2, C, 20, t + 1 * MS, -1)]))
    for k in range(1, 200):
        out += eng.advance(t + k * 10 * MS)
    hangs = {r.id: r for r in out if r.kind.endswith("hang")}
    assert [r.suspects[0].rank for r in hangs.values() if r.kind == "noncomm_hang"] == [3], \
        [r.summary for r in hangs.values()]
    assert not [r for r in hangs.values() if r.kind == "comm_hang"], \
        [r.summary for r in hangs.values()]
