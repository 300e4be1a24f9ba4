"""Late together across communicators (``diagnosis.engine.colate``): a member late at kept
calls where its data-parallel ring ended late for every member is not late by itself."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.colate import CoLateness

HOSTS, GPUS = 16, 4


def _job() -> tuple[Arena, list[int], list[int]]:
    """16 hosts of 4 GPUs: a tensor-parallel group per host, a data-parallel ring per GPU."""
    arena = Arena(16)
    tp = [arena.add_group(h, f"tp.{h}", np.arange(h * GPUS, (h + 1) * GPUS))
          for h in range(HOSTS)]
    dp = [arena.add_group(HOSTS + g, f"dp.{g}", np.arange(g, HOSTS * GPUS, GPUS))
          for g in range(GPUS)]
    return arena, tp, dp


def _calls(board: CoLateness, tp: list[int], late_of) -> None:
    """80 calls of every tensor-parallel group, each keeping one in four (its own ones, as the
    crc32 rule keeps other calls of each communicator); ``late_of(host, seq)``: the members'
    lateness at that call."""
    rng = np.random.default_rng(7)
    for seq in range(80):
        keep = [h for h in range(HOSTS) if (h + seq * 3) % 4 == 0]
        late = np.stack([late_of(h, seq) + rng.normal(0, 0.01, GPUS) for h in keep])
        board.add(np.array([tp[h] for h in keep]), np.full(len(keep), seq), late)


def test_a_gpu_late_where_its_ring_ended_late_for_all_is_explained_by_the_ring():
    arena, tp, _ = _job()
    board = CoLateness(arena)

    def late_of(h: int, seq: int) -> np.ndarray:
        x = np.zeros(GPUS)
        if seq % 8 == 0:        # the first call after the all-reduce: ring 1 ended late
            x[1] = 0.3
        return x
    _calls(board, tp, late_of)
    assert board.shared(1, tp[0], 0.15)            # rank 1: GPU 1 of host 0
    assert board.shared(4 * 4 + 1, tp[4], 0.15)      # GPU 1 of host 4, which keeps them too
    assert not board.shared(2, tp[0], 0.15)        # never late


def test_a_slow_gpu_is_late_alone():
    arena, tp, _ = _job()
    board = CoLateness(arena)

    def late_of(h: int, seq: int) -> np.ndarray:
        x = np.zeros(GPUS)
        if h == 3:
            x[2] = 0.3          # GPU 2 of host 3, at every call; its ring's others are not
        return x
    _calls(board, tp, late_of)
    assert not board.shared(3 * GPUS + 2, tp[3], 0.15)


def test_memory_is_bounded():
    arena, tp, _ = _job()
    board = CoLateness(arena, max_rows=200)
    _calls(board, tp, lambda h, seq: np.zeros(GPUS))
    assert sum(len(p[0]) for p in board._parts[GPUS]) <= 200 + HOSTS * GPUS


def test_a_few_calls_its_ring_shares_by_chance_do_not_explain_a_slow_gpu():
    """GPU 2 of host 3 late at every call; its ring's other members kept the same calls only
    six times, late at three of them and early at the others (``slow_gpu`` at 128 GPUs, K = 16,
    120 iterations: rings of four, their rows at coinciding kept calls from the warm-up)."""
    arena, tp, _ = _job()
    board = CoLateness(arena)
    rng = np.random.default_rng(7)
    ring_at = {5: 0.2, 11: 0.2, 17: 0.2, 23: -0.1, 29: -0.2, 35: -0.3}
    for seq in range(80):
        late = np.zeros(GPUS) + rng.normal(0, 0.01, GPUS)
        late[2] += 0.3
        board.add(np.array([tp[3]]), np.array([seq]), late[None, :])
        if seq in ring_at:
            others = [h for h in range(HOSTS) if h != 3][:3]
            rows = np.zeros((3, GPUS))
            rows[:, 2] = ring_at[seq]
            board.add(np.array([tp[h] for h in others]), np.full(3, seq), rows)
    assert not board.shared(3 * GPUS + 2, tp[3], 0.15)


def test_members_are_kept_only_for_communicators_of_the_size():
    """Send/recv channels and groups of other sizes added between calls take no room in a
    size's table (a row each, times the size, took gigabytes at 131,072 ranks)."""
    arena, tp, _ = _job()
    board = CoLateness(arena)
    board.add(np.array([tp[0]]), np.array([0]), np.zeros((1, GPUS)))
    # 500 channels of two, then one more group of four
    arena.channels(np.zeros(500, dtype=np.int64), np.arange(500) % 64,
                   (np.arange(500) + 1) % 64 + 64 * (np.arange(500) // 64), ["pp"])
    extra = arena.add_group(99, "tp.extra", np.arange(4) + 70)
    board.add(np.array([extra, tp[1]]), np.array([1, 1]), np.ones((2, GPUS)))
    rows_of, table = board._tables[GPUS]
    assert len(table) == HOSTS + 1, "a row per group of four (the rings have 16), no more"
    assert (table[rows_of[extra]] == np.arange(4) + 70).all()
    late_at_1 = board._parts[GPUS][-1]
    assert sorted(late_at_1[1].tolist()) == sorted([*range(70, 74), *range(4, 8)])
