"""The arena's communicators: a rank's position in each, whatever order they came in."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena


def test_positions_of_groups_and_channels_registered_in_turns():
    arena = Arena(4)
    tp = arena.add_group(0, "tp0", np.array([8, 3, 5]))
    dp = arena.add_group(1, "dp0", np.array([3, 9]))
    # two send/recv channels of one communicator at once, and a third later
    ch = arena.channels(np.array([2, 2]), np.array([5, 9]), np.array([9, 5]), ["", "", "pp"])
    late = arena.channels(np.array([2]), np.array([3]), np.array([8]), ["", "", "pp"])
    big = arena.add_group(3, "world", np.arange(10)[::-1])
    g = np.array([tp, tp, tp, tp, dp, dp, ch[0], ch[0], ch[1], late[0], late[0], big, big])
    rank = np.array([8, 3, 5, 9, 9, 8, 5, 9, 5, 3, 8, 0, 9])
    assert arena.positions(g, rank).tolist() == [0, 1, 2, -1, 1, -1, 0, 1, 1, 0, 1, 9, 0]
