"""progress records, by hand on small cases and against a brute-force recomputation."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from c4.reduce import EdgeReducer, direction
from tests.support.reduce_ops import ops, progress

W = 100
S = ["all_reduce", "send", "recv", "isend", "irecv", "tp.0", "pp.0"]


def test_a_call_spanning_windows_is_entered_in_its_first_window():
    red = EdgeReducer(window_ns=W)
    # entered at 50 (window 0), completes at 350 (window 3); its completed row arrives after
    # windows 0-2 closed, its entry came before as an open row
    red.add_ops(ops([{"rank": 0, "pg": "tp.0", "seq": 0, "op": "all_reduce", "t_enter_ns": 50,
                      "t_end_ns": None}], S))
    first = progress(red.advance(120))
    assert first == [{"rank": 0, "pg": "tp.0", "t_ns": 100, "entered": 0}]
    assert progress(red.advance(300)) == []           # windows 1, 2: nothing changed
    red.add_ops(ops([{"rank": 0, "pg": "tp.0", "seq": 0, "op": "all_reduce", "t_enter_ns": 50,
                      "t_end_ns": 350}], S))
    assert progress(red.flush(400)) == [
        {"rank": 0, "pg": "tp.0", "t_ns": 400, "entered": 0, "completed": 0}]
    assert red.stats.late_progress == 0


def test_only_windows_that_changed_are_emitted_with_the_highest_seq():
    rows = [{"rank": 1, "pg": "tp.0", "seq": s, "op": "all_reduce", "t_enter_ns": te,
             "t_end_ns": tn} for s, te, tn in ((0, 10, 20), (1, 30, 40), (2, 250, 260))]
    red = EdgeReducer(window_ns=W)
    red.observe_calls(ops(rows, S))
    got = progress(red.flush(1000))
    # window 0: seqs 0 and 1 entered and done; windows 1, 3..9 silent; window 2: seq 2
    assert got == [{"rank": 1, "pg": "tp.0", "t_ns": 100, "entered": 1, "completed": 1},
                   {"rank": 1, "pg": "tp.0", "t_ns": 300, "entered": 2, "completed": 2}]


def test_send_recv_keyed_per_direction_and_peer_whatever_the_op_name():
    rows = [
        {"rank": 0, "pg": "pp.0", "seq": 0, "op": "send", "peer": 1, "t_enter_ns": 5,
         "t_end_ns": 9},
        {"rank": 0, "pg": "pp.0", "seq": 1, "op": "isend", "peer": 1, "t_enter_ns": 15,
         "t_end_ns": 19},
        {"rank": 0, "pg": "pp.0", "seq": 0, "op": "isend", "peer": 2, "t_enter_ns": 25,
         "t_end_ns": None},
        {"rank": 0, "pg": "pp.0", "seq": 4, "op": "irecv", "peer": 1, "t_enter_ns": 35,
         "t_end_ns": 39},
    ]
    red = EdgeReducer(window_ns=W)
    red.observe_calls(ops(rows, S))
    got = {(r["op"], r["peer"]): r for r in progress(red.flush(100))}
    assert got == {
        ("send", 1): {"rank": 0, "pg": "pp.0", "op": "send", "peer": 1, "t_ns": 100,
                      "entered": 1, "completed": 1},
        ("send", 2): {"rank": 0, "pg": "pp.0", "op": "send", "peer": 2, "t_ns": 100,
                      "entered": 0},
        ("recv", 1): {"rank": 0, "pg": "pp.0", "op": "recv", "peer": 1, "t_ns": 100,
                      "entered": 4, "completed": 4},
    }


def test_failed_calls_are_entered_not_completed():
    rows = [{"rank": 0, "pg": "tp.0", "seq": 0, "op": "all_reduce", "t_enter_ns": 5,
             "t_end_ns": 9},
            {"rank": 0, "pg": "tp.0", "seq": 1, "op": "all_reduce", "t_enter_ns": 15,
             "t_end_ns": 19, "status": 2}]
    red = EdgeReducer(window_ns=W)
    red.observe_calls(ops(rows, S))
    assert progress(red.flush(50)) == [
        {"rank": 0, "pg": "tp.0", "t_ns": 50, "entered": 1, "completed": 0}]


def test_an_event_after_its_window_closed_counts_in_the_next_open_one():
    red = EdgeReducer(window_ns=W)
    red.advance(200)
    red.observe_calls(ops([{"rank": 0, "pg": "tp.0", "seq": 0, "op": "all_reduce",
                            "t_enter_ns": 50, "t_end_ns": 60}], S))
    assert progress(red.advance(300)) == [
        {"rank": 0, "pg": "tp.0", "t_ns": 300, "entered": 0, "completed": 0}]
    assert red.stats.late_progress == 2


@pytest.mark.parametrize("name,want", [("send", "send"), ("isend", "send"), ("irecv", "recv"),
                                       ("Recv", "recv"), ("all_reduce", None),
                                       ("all_gather", None)])
def test_direction(name, want):
    assert direction(name) == want


# ----- property: streaming output equals a brute-force recomputation ------------------------
def _random_calls(rng: np.random.Generator) -> list[dict]:
    """Calls of 3 ranks on a collective group and a send/recv pair, some long, some open,
    some failed, seqs in order per key."""
    rows = []
    for rank in range(3):
        keys = [("tp.0", "all_reduce", -1), ("pp.0", rng.choice(["send", "isend"]), (rank + 1) % 3),
                ("pp.0", rng.choice(["recv", "irecv"]), (rank + 2) % 3)]
        for pg, op, peer in keys:
            t = int(rng.integers(0, 300))
            for seq in range(int(rng.integers(1, 12))):
                t += int(rng.integers(0, 150))
                dur = int(rng.choice([rng.integers(1, 30), rng.integers(100, 600)]))
                end = None if rng.random() < 0.05 else t + dur
                status = 2 if rng.random() < 0.05 else 0
                rows.append({"rank": rank, "pg": pg, "seq": seq, "op": str(op), "peer": peer,
                             "t_enter_ns": t, "t_end_ns": end, "status": status})
                t = end if end is not None else t + 2000
    return rows


def _brute(rows: list[dict], end_ns: int) -> list[tuple]:
    def key(r):
        d = direction(r["op"])
        return (r["rank"], r["pg"], d, r["peer"] if d else -1)

    by_key = defaultdict(list)
    for r in rows:
        by_key[key(r)].append(r)
    out = []
    for k, rs in by_key.items():
        prev = (-1, -1)
        for w in range(0, end_ns // W + 1):
            e = min((w + 1) * W, end_ns)
            ent = max([r["seq"] for r in rs if r["t_enter_ns"] < e], default=-1)
            com = max([r["seq"] for r in rs if r["t_end_ns"] is not None and r["t_end_ns"] < e
                       and r["status"] == 0], default=-1)
            if (ent, com) != prev:
                out.append((*k, e, ent, com))
            prev = (ent, com)
            if e == end_ns:
                break
    return sorted(out)


def _as_tuples(recs: list[dict]) -> list[tuple]:
    return sorted((r["rank"], r["pg"], r.get("op"), r.get("peer", -1), r["t_ns"],
                   r.get("entered", -1), r.get("completed", -1)) for r in recs)


@pytest.mark.parametrize("seed", range(25))
def test_streamed_progress_equals_brute_force(seed):
    """Fed as collectors ship (completed rows once complete, an open row for each call
    entered before the step), with the watermark at the step's time: every window end's
    progress equals a recomputation from all calls."""
    rng = np.random.default_rng(seed)
    rows = _random_calls(rng)
    end_ns = max(max(r["t_enter_ns"], r["t_end_ns"] or 0) for r in rows) + int(
        rng.integers(1, 400))
    red = EdgeReducer(window_ns=W)
    got: list[dict] = []
    t = 0
    while t < end_ns:
        nxt = min(end_ns, t + int(rng.integers(1, 3 * W)))
        entered = [dict(r, t_end_ns=None) for r in rows if t <= r["t_enter_ns"] < nxt]
        done = [r for r in rows if r["t_end_ns"] is not None and t <= r["t_end_ns"] < nxt]
        rng.shuffle(done)
        for batch in (entered, done):
            if batch:
                red.add_ops(ops(batch, S))
        got += progress(red.advance(nxt))
        t = nxt
    got += progress(red.flush(end_ns))
    assert got
    assert _as_tuples(got) == _brute(rows, end_ns)
    assert red.stats.late_progress == 0
