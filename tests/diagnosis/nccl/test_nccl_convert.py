"""What the converter remembers between batches: the calls each rank completed (History: what
it does next when RAS shows it idle) and the collectives per communicator (Frontiers: which
calls RAS's launch counts put it inside), fed a batch at a time as a follower feeds them."""

from __future__ import annotations

import numpy as np

from diagnosis.nccl.convert import Frontiers, History

NAMES = ["dp", "pp", "all_reduce", "send", "recv"]
DP, PP, AR, SEND, RECV = range(5)


def _rows(rank, pg, op, peer, seq, end):
    return (np.asarray(rank), np.asarray(pg), np.asarray(op), NAMES, np.asarray(peer),
            np.asarray(seq), np.asarray(end))


def test_history_tells_the_send_that_follows_a_ranks_pattern_across_batches():
    h = History()
    # rank 0, each iteration: all-reduce on dp, then a send to rank 1 on pp; rank 1 receives
    t = 0
    for it in range(3):
        rank, pg, op, peer, seq, end = [], [], [], [], [], []
        for r, (g, o, p) in ((0, (DP, AR, -1)), (0, (PP, SEND, 1)), (1, (DP, AR, -1)),
                             (1, (PP, RECV, 0))):
            t += 10
            rank.append(r), pg.append(g), op.append(o), peer.append(p), seq.append(it)
            end.append(t)
        h.add(*_rows(rank, pg, op, peer, seq, end))
    # a fourth all-reduce completed, the send after it not
    h.add(*_rows([0], [DP], [AR], [-1], [3], [1000]))
    assert h.last_end(0, 2000) == 1000
    assert h.last_end(0, 500) == 100          # its send of the third iteration
    assert h.next_p2p(0, 2000) == ("pp", "send", 1, 3)
    assert h.last_end(2, 2000) is None


def test_history_tells_the_call_after_a_run_of_alternating_calls_by_the_steps_period():
    # each step: all-gather, reduce-scatter five times on tp, then a send; the last step
    # stopped after its fifth reduce-scatter: the send comes next, though every context of
    # up to 8 calls (..., all-gather, reduce-scatter) was followed by an all-gather too
    names = ["tp", "pp", "all_gather", "reduce_scatter", "send"]
    step = [(0, 2, -1), (0, 3, -1)] * 5 + [(1, 4, 1)]
    calls = step * 40 + step[:-1]
    # seqs: per communicator for collectives, per pair and direction for sends
    count: dict[int, int] = {}
    seq = []
    for pg, _, _ in calls:
        count[pg] = count.get(pg, -1) + 1
        seq.append(count[pg])
    h = History()
    h.add(np.zeros(len(calls), dtype=np.int64), np.asarray([c[0] for c in calls]),
          np.asarray([c[1] for c in calls]), names, np.asarray([c[2] for c in calls]),
          np.asarray(seq), np.arange(len(calls)) * 10)
    assert h.next_call(0, 10 ** 6) == ("pp", "send", 1, 40)


def test_history_keeps_each_ranks_latest_calls_only():
    h = History(keep=4)
    for b in range(3):
        n = 5
        h.add(*_rows([7] * n, [DP] * n, [AR] * n, [-1] * n, list(range(b * n, b * n + n)),
                     [100 * (b * n + i) for i in range(n)]))
    rows = h._sorted(7)
    assert [r[4] for r in rows] == [11, 12, 13, 14]


def test_frontiers_per_rank_and_communicator_across_batches():
    f = Frontiers()
    f.add(np.asarray([0, 1, 0]), np.asarray([DP, DP, DP]), np.asarray([0, 0, 1]),
          np.asarray([AR, AR, AR]), NAMES, np.asarray([0, 0, 1]), np.asarray([10, 12, 20]))
    f.add(np.asarray([1, 0]), np.asarray([DP, PP]), np.asarray([1, 0]),
          np.asarray([AR, AR]), NAMES, np.asarray([1, 0]), np.asarray([22, 30]))
    assert f.at(0, "dp", 15) == (0, {"all_reduce": 0})
    assert f.at(0, "dp", 25) == (1, {"all_reduce": 1})
    assert f.at(1, "dp", 21) == (0, {"all_reduce": 0})
    assert f.at(0, "pp", 29) is None and f.at(0, "pp", 30) == (0, {"all_reduce": 0})
    assert f.known(1, "dp") and not f.known(1, "pp")
