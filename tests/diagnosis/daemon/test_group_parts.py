"""Communicators known in parts (every node's members) are joined into one group record."""

from __future__ import annotations

import grpc
import pytest

from c4.proto import c4_pb2
from diagnosis.daemon.errors import Rejected
from diagnosis.daemon.group_parts import GroupParts


def _part(positions, ranks, size=4, pg="dp", job="j"):
    return c4_pb2.GroupInfo(job=job, pg=pg, size=size, positions=positions, ranks=ranks)


def test_parts_from_every_node_make_the_group_once():
    parts = GroupParts(max_ranks=1024)
    assert parts.add(_part([2, 3], [10, 11])) is None
    assert parts.pending() == 1
    # a part repeated (a sidecar announcing again) changes nothing
    assert parts.add(_part([2, 3], [10, 11])) is None
    whole, new = parts.add(_part([0, 1], [4, 5]))
    assert (whole.job, whole.pg, list(whole.ranks), new) == ("j", "dp", [4, 5, 10, 11], True)
    assert parts.pending() == 0
    # once joined, a later part (a sidecar that restarted) is answered with the group
    again, new = parts.add(_part([0, 1], [4, 5]))
    assert (list(again.ranks), new) == ([4, 5, 10, 11], False)
    # the same name in another job or attempt is another communicator
    assert parts.add(_part([0, 1], [4, 5], job="k")) is None
    assert parts.pending() == 1


def test_a_group_that_came_whole_is_no_longer_waited_for():
    parts = GroupParts(max_ranks=1024)
    parts.add(_part([0, 1], [4, 5]))
    parts.whole(c4_pb2.GroupInfo(job="j", pg="dp", ranks=[4, 5, 10, 11]))
    assert parts.pending() == 0
    assert parts.add(_part([2, 3], [10, 11]))[1] is False


@pytest.mark.parametrize("bad, words", [
    (_part([0, 1], [4, 5], size=0), "has size 0"),
    (_part([0, 1], [4, 5], size=2048), "--max-ranks"),
    (_part([0], [4, 5]), "2 ranks and 1 positions"),
    (_part([0, 4], [4, 5]), "position outside 0..3"),
    (_part([1, 1], [4, 5]), "repeats a position"),
    (_part([0, 1], [4, -5]), "negative rank"),
])
def test_a_part_that_contradicts_itself_is_refused_with_what_to_fix(bad, words):
    with pytest.raises(Rejected) as exc:
        GroupParts(max_ranks=1024).add(bad)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert words in exc.value.message


def test_parts_that_disagree_are_refused_and_the_group_is_still_joined():
    parts = GroupParts(max_ranks=1024)
    parts.add(_part([0, 1], [4, 5]))
    with pytest.raises(Rejected, match="position 1, which another part gave rank 5"):
        parts.add(_part([1, 2], [6, 10]))
    with pytest.raises(Rejected, match="another node's part said 4"):
        parts.add(_part([2, 3, 4, 5], [10, 11, 12, 13], size=8))
    assert list(parts.add(_part([2, 3], [10, 11]))[0].ranks) == [4, 5, 10, 11]


def test_positions_held_for_unfinished_groups_are_bounded():
    parts = GroupParts(max_ranks=1024, max_positions=4)
    parts.add(_part([0, 1], [4, 5], pg="a"))
    parts.add(_part([0, 1], [4, 5], pg="b"))
    with pytest.raises(Rejected) as exc:
        parts.add(_part([0], [4], pg="c"))
    assert exc.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    # a group completing frees its positions
    parts.add(_part([2, 3], [6, 7], pg="a"))
    assert parts.add(_part([0], [4], pg="c")) is None
