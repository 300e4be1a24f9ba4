"""Who the others wait for, from progress snapshots (``diagnosis.engine.waits``), whatever the
sampling factor: the member outside a collective while its peers are inside, waiting in no
other call, from some moment on."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.waits import WaitBoard
from tests.diagnosis.engine.test_engine_reduced import analyse, named

W = 1_000_000_000


def _board(members: int = 8) -> tuple[Arena, WaitBoard, int, int]:
    arena = Arena(16)
    g = arena.add_group(0, "dp.0", np.arange(members))
    # a pipeline channel from rank 7 to rank 0
    ch = int(arena.channels(np.array([1]), np.array([7]), np.array([0]), ["dp.0", "pp.0"])[0])
    return arena, WaitBoard(arena, EngineConfig()), g, ch


def _window(board: WaitBoard, g: int, t: int, inside: list[bool], seq: int) -> None:
    n = len(inside)
    entered = np.full(n, seq + 1)
    completed = np.where(inside, seq, seq + 1)
    board.update(np.full(n, g), np.arange(n), entered, completed, np.full(n, t))


def test_the_member_its_peers_wait_for_from_some_moment_on_is_found():
    _, board, g, _ = _board()
    rng = np.random.default_rng(1)
    for w in range(60):
        inside = [True] * 8
        if w < 30:
            inside[int(rng.integers(8))] = False    # anyone comes last now and then
        else:
            inside[3] = False                        # from window 30 on, rank 3
        _window(board, g, (w + 1) * W, inside, w)
    found = board.judge()
    assert [f.rank for f in found] == [3]
    assert found[0].onset_ns == 31 * W
    assert found[0].hits == found[0].count


def test_anyone_last_now_and_then_is_nobody():
    _, board, g, _ = _board()
    rng = np.random.default_rng(2)
    for w in range(60):
        inside = [True] * 8
        inside[int(rng.integers(8))] = False
        _window(board, g, (w + 1) * W, inside, w)
    assert board.judge() == []


def _sparse(last_after: list[int]) -> list:
    """60 windows of a communicator met once an iteration, whose windows catch it inside its
    call only now and then (they fall at about the same point of every iteration): before
    window 30, at five windows, a different member last each time; from window 30 on, at
    seven, the member ``last_after`` names."""
    _, board, g, _ = _board()
    before = dict(zip((3, 9, 15, 21, 27), (0, 5, 1, 6, 2), strict=True))
    after = dict(zip((30, 31, 36, 42, 43, 48, 54), last_after, strict=True))
    for w in range(60):
        last = before.get(w, after.get(w))
        inside = [last is not None] * 8
        if last is not None:
            inside[last] = False
        _window(board, g, (w + 1) * W, inside, w)
    return board.judge()


def test_a_member_last_at_every_one_of_a_few_snapshots_is_found():
    found = _sparse([3] * 7)
    assert [(f.rank, f.hits, f.count) for f in found] == [(3, 7, 7)]


def test_a_member_last_at_five_of_seven_snapshots_is_nobody():
    """The slowest of healthy replicas is the one outside at most of the few snapshots that
    catch its communicator inside a call: five of seven is no evidence of more than that."""
    assert _sparse([3, 3, 5, 3, 3, 1, 3]) == []


def test_a_node_whose_rows_come_late_is_not_waited_for():
    """From window 30 on, rank 3's sidecar delivers each window's rows with the others' rows of
    the window after next (it fell behind). Every member is inside the barrier at odd windows
    and outside at even ones; were a window taken as soon as a later one began, rank 3 would
    still look outside at odd ones while the others wait."""
    _, board, g, _ = _board()
    others = np.array([0, 1, 2, 4, 5, 6, 7])

    def rows(members: np.ndarray, w: int) -> tuple[np.ndarray, ...]:
        n = len(members)
        inside = w % 2 == 1
        return (np.full(n, g), members, np.full(n, w + 1), np.full(n, w if inside else w + 1),
                np.full(n, (w + 1) * W))
    for w in range(60):
        late = [rows(others, w), rows(np.array([3]), w - 2)]
        parts = [rows(np.arange(8), w)] if w < 30 else late
        board.update(*(np.concatenate(c) for c in zip(*parts, strict=True)))
    assert board.judge() == []
    # (no snapshot counted it as the one waited for)
    assert np.nansum(board.y[board.off[g] + 3]) == 0


def test_a_member_that_waits_in_another_call_is_no_cause():
    """Rank 0 is outside the all-reduce but inside a receive from rank 7: it waits too (a
    pipeline stage after a slow one), so its peers do not wait for it."""
    _, board, g, ch = _board()
    rng = np.random.default_rng(3)
    for w in range(60):
        t = (w + 1) * W
        inside = [True] * 8
        inside[0 if w >= 30 else int(rng.integers(8))] = False
        if w >= 30:    # rank 0 (the channel's receiving end) is inside a receive
            board.update(np.array([ch]), np.array([1]), np.array([w + 1]), np.array([w]),
                         np.array([t]))
        _window(board, g, t, inside, w)
    assert board.judge() == []


def test_a_channel_side_waited_for_by_the_other_is_held_beyond_its_replicas():
    """Rank 0 waits inside its receive from rank 7 at 10 windows: at 6 of them rank 7 is inside
    no call (rank 0 waits for it: it computes), at 4 inside the all-reduce (rank 7 waits too)."""
    _, board, g, ch = _board()
    for w in range(10):
        t = (w + 1) * W
        free = w < 6
        _window(board, g, t, [True] * 7 + [not free], w)
        board.update(np.array([ch, ch]), np.array([0, 1]), np.array([w, w + 1]),
                     np.array([w, w]), np.array([t, t]))
    _window(board, g, 11 * W, [True] * 8, 10)
    _window(board, g, 12 * W, [True] * 8, 11)
    assert board.held(7, g) == 6
    assert board.held(0, g) == 0 and board.held(3, g) == 0


def test_a_slow_host_is_named_at_one_call_in_64(tmp_path):
    """At K = 64 a tensor-parallel group keeps about one call in 64 and its data-parallel
    all-reduce hardly ever: its pace between kept calls cannot be compared with its replicas'
    (the spans hold their waits for it). Its replicas' progress shows them waiting for it."""
    reports, truth, _ = analyse(tmp_path, 64, "slow_host:auto@12,slow=1.5", gpus=256,
                                iterations=40, layers=16)
    assert named(reports, truth["faults"][0]), [(r.kind, r.summary) for r in reports]
    assert len(reports) == 1, [(r.kind, r.summary) for r in reports]
