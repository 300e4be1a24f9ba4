"""A send that returned (gloo and TCP hand the data to the socket) while its receiver waits, or
a collective some members got out of while another waits inside: with the waiting rank heard
from since, the data is stuck on the way (``comm_hang``); on op records alone, the waiting rank
is the one that stopped (``noncomm_hang``), as before."""

from __future__ import annotations

from functools import partial

from diagnosis.engine import Engine, EngineConfig
from tests.support.engine_builders import OpRow, advance_quietly, op_columns, op_row

MS = 1_000_000
STRINGS = ["a", "p", "all_reduce", "send", "recv", ""]
A, P, AR, SEND, RECV, DT = range(6)
_cols = partial(op_columns, STRINGS)


def _row(rank: int, pg: int, seq: int, op: int, enter: int, end: int, peer: int = -1) -> OpRow:
    return op_row(rank, seq, enter, end, pg=pg, op=op, nbytes=1 << 20, dtype=DT, peer=peer)


def _wait(eng: Engine, t: int, heartbeats: bool) -> list:
    """Advance 8 s past ``t``, every rank heard each second if ``heartbeats``; the hang
    reports filed meanwhile."""
    out = advance_quietly(eng, t, 79, heard=range(4) if heartbeats else ())
    return [r for r in out if r.kind in ("comm_hang", "noncomm_hang")]


def _stuck_send(heartbeats: bool):
    """Ranks 0-3 (hosts h0, h1) all-reduce on "a"; rank 1 sends to rank 2 on "p". At step 20
    rank 1's send returns but rank 2's recv never does; ranks 0, 1, 3 then wait in a #21.
    ``heartbeats``: every rank is heard each second (collector stats), rank 2 included."""
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r in range(4):
        eng.add_rank(r, f"h{r // 2}", f"h{r // 2}/gpu{r % 2}")
    eng.add_group("a", [0, 1, 2, 3])
    t = 0
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(1, P, seq, SEND, t, t + 2 * MS, peer=2),
                           _row(2, P, seq, RECV, t, t + 2 * MS, peer=1)]
                          + [_row(r, A, seq, AR, t + 3 * MS, t + 5 * MS) for r in range(4)]))
        eng.advance(t)
    t += 20 * MS
    eng.add_ops(_cols([_row(1, P, 20, SEND, t, t + MS // 2, peer=2),
                       _row(2, P, 20, RECV, t, -1, peer=1)]
                      + [_row(r, A, 20, AR, t + 3 * MS, -1) for r in (0, 1, 3)]))
    return _wait(eng, t, heartbeats)


def test_receiver_heard_from_while_it_waits_is_a_stuck_transfer():
    hangs = _stuck_send(heartbeats=True)
    last = hangs[-1]
    assert last.kind == "comm_hang" and last.state == "open", [r.summary for r in hangs]
    assert last.evidence["group"] == "send/recv p:1>2"
    assert "rank 1 (h0/gpu1) got out, rank 2 (h1/gpu0) still waits for data" in last.summary
    # the first report, before rank 2 was heard well after the data was due, blamed rank 2;
    # it is withdrawn
    assert hangs[0].kind == "noncomm_hang" and hangs[0].evidence["culprits"] == [2]
    assert [r.state for r in hangs if r.id == hangs[0].id][-1] == "resolved"


def test_on_op_records_alone_the_waiting_receiver_is_named():
    hangs = _stuck_send(heartbeats=False)
    assert {r.kind for r in hangs} == {"noncomm_hang"}
    assert hangs[-1].evidence["culprits"] == [2]


def _stuck_inside(heartbeats: bool):
    """Ranks 0-3 all-reduce on "a" each step; at step 20 ranks 0-2 get out and rank 3 stays
    inside (its last chunk never arrives), then 0-2 wait in a #21 without it."""
    eng = Engine(config=EngineConfig(hang_min_ns=100 * MS))
    for r in range(4):
        eng.add_rank(r, f"h{r // 2}", f"h{r // 2}/gpu{r % 2}")
    eng.add_group("a", [0, 1, 2, 3])
    t = 0
    for seq in range(20):
        t += 20 * MS
        eng.add_ops(_cols([_row(r, A, seq, AR, t + r * MS // 10, t + 5 * MS) for r in range(4)]))
        eng.advance(t)
    t += 20 * MS
    eng.add_ops(_cols([_row(r, A, 20, AR, t + r * MS // 10, t + 5 * MS) for r in range(3)]
                      + [_row(3, A, 20, AR, t + MS, -1)]
                      + [_row(r, A, 21, AR, t + 25 * MS, -1) for r in range(3)]))
    return _wait(eng, t, heartbeats)


def test_member_left_inside_a_collective_while_heard_from_waits_for_stuck_data():
    hangs = _stuck_inside(heartbeats=True)
    last = hangs[-1]
    assert last.kind == "comm_hang" and last.state == "open", [r.summary for r in hangs]
    assert "rank 3 (h1/gpu1) still waits for data" in last.summary


def test_member_left_inside_a_collective_on_op_records_alone_is_named():
    hangs = _stuck_inside(heartbeats=False)
    assert {r.kind for r in hangs} == {"noncomm_hang"}
    assert hangs[-1].evidence["culprits"] == [3]
