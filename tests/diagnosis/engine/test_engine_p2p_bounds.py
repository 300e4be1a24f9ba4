"""A point-to-point call waits the bound its channel has learnt, whichever end's row came last:
neither a receiver waiting alone nor rows in another order make it a call of an operation never
seen to finish, which waits the cold bound (30 s). Recordings here stop 5 s after the job stops
moving."""

from __future__ import annotations

import pytest

from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace

MS = 1_000_000
STEPS = 40
WAIT = 5_000 * MS


def _pipeline(tmp_path, send_first: bool, last_step):
    """Ranks 0 > 1 pass activations by send/recv, 10 ms apart, with connection records; the
    rows of each finished transfer come send first or recv first. ``last_step(w, t)`` writes
    the last transfer."""
    path = tmp_path / "t.jsonl"
    t = 0
    with TraceWriter(path) as w:
        w.group("pp", [0, 1])
        for step in range(STEPS - 1):
            t += 10 * MS
            rows = [(0, "send", 1), (1, "recv", 0)]
            for rank, op, peer in rows if send_first else rows[::-1]:
                w.op(rank, "pp", step, op, 1 << 20, t, t + 2 * MS, peer=peer)
            w.conn(0, 1, 1 << 20, t, t + 2 * MS, pg="pp", seq=step)
        t += 10 * MS
        last_step(w, t)
        w.end(t + WAIT)
    reports, _ = feed_trace(Engine(), path)
    return [(r.kind, [s.rank for s in r.suspects]) for r in reports]


@pytest.mark.parametrize("send_first", [True, False])
def test_a_transfer_both_ends_entered_is_a_comm_hang_within_seconds(tmp_path, send_first):
    def stuck(w, t):
        # the receiver entered first, and its row came first
        w.op(1, "pp", STEPS - 1, "recv", 1 << 20, t - 3 * MS, None, peer=0)
        w.op(0, "pp", STEPS - 1, "send", 1 << 20, t, None, peer=1)
        w.conn(0, 1, 1 << 20, t, None, pg="pp", seq=STEPS - 1)

    found = _pipeline(tmp_path, send_first, stuck)
    assert [kind for kind, _ in found] == ["comm_hang"]


@pytest.mark.parametrize("send_first", [True, False])
def test_a_receiver_waiting_alone_names_its_sender_within_seconds(tmp_path, send_first):
    def absent(w, t):
        w.op(1, "pp", STEPS - 1, "recv", 1 << 20, t, None, peer=0)

    assert _pipeline(tmp_path, send_first, absent) == [("noncomm_hang", [0])]
