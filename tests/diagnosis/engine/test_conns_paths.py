"""The recorded path of each connection, as transfer (``conn``) and window (``linkstat``) rows
set it: row by row, a changed path marked once per change, however a batch repeats keys."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.linkstats import LinkStatFeed
from diagnosis.engine.records import ConnRecords, LinkStatRecords

A = ("node000/nic0", "leaf00", "node001/nic0")
B = ("node000/nic0", "leaf01", "node001/nic0")
S = 1_000_000_000


def _window() -> ConnWindow:
    return ConnWindow(Arena(EngineConfig().window), EngineConfig())


def _conns(src: list[int], dst: list[int], paths: list[tuple[str, ...] | None]) -> ConnRecords:
    n = len(src)
    return ConnRecords.build(src, dst, [1 << 20] * n, [S * (i + 1) for i in range(n)],
                             [S * (i + 1) + 1000 for i in range(n)], paths=paths)


def test_paths_are_taken_row_by_row() -> None:
    win = _window()
    # one key: its path A, then B, then A again in one batch; a row without a path keeps it
    win.add(_conns([0, 0, 0, 0, 1], [8, 8, 8, 8, 9], [A, B, None, A, B]), np.full(5, -1))
    k0, k1 = 0, 1                                 # the keys, numbered as first seen
    assert win.path[k0] == A and win.path[k1] == B
    assert win.path_version == 4                  # A, B, A for key 0; B for key 1
    assert win.changed == [k0, k1, k0, k0, k0, k1]    # new keys first, then each change


def test_a_batch_that_repeats_the_paths_changes_nothing() -> None:
    win = _window()
    win.add(_conns([0, 1], [8, 9], [A, B]), np.full(2, -1))
    version, changed = win.path_version, list(win.changed)
    win.add(_conns([1, 0, 0], [9, 8, 8], [B, A, None]), np.full(3, -1))
    assert win.path_version == version and win.changed == changed
    assert win.path[0] == A and win.path[1] == B


def test_a_path_given_as_a_list_is_kept_as_a_tuple() -> None:
    win = _window()
    win.add(_conns([0], [8], [A]), np.full(1, -1))
    version = win.path_version
    win.set_paths(np.array([0]), [list(A)])
    assert win.path[0] == A and win.path_version == version      # the same path: no change
    win.set_paths(np.array([0]), [list(B)])
    assert win.path[0] == B and isinstance(win.path[0], tuple)
    assert win.path_version == version + 1


def test_a_window_row_that_changes_a_path_moves_the_path_version() -> None:
    # what keys the peers' load model (peers.LoadModel.hop_table) rebuilds its hops on: a
    # connection rehashed onto another uplink must not keep its old hops
    win = _window()
    feed = LinkStatFeed(win)
    feed.add(LinkStatRecords.build([0], [8], [S], [S], transfers=[1], nbytes=[1 << 20],
                                   busy_ns=[1000], paths=[A]), np.full(1, -1))
    version = win.path_version
    feed.add(LinkStatRecords.build([0], [8], [2 * S], [S], transfers=[1], nbytes=[1 << 20],
                                   busy_ns=[1000], paths=[A]), np.full(1, -1))
    assert win.path_version == version
    feed.add(LinkStatRecords.build([0], [8], [3 * S], [S], transfers=[1], nbytes=[1 << 20],
                                   busy_ns=[1000], paths=[B]), np.full(1, -1))
    assert win.path[0] == B and win.path_version == version + 1
