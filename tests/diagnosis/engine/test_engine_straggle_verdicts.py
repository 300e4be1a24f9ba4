"""How ``SampledStragglers.judge`` weighs its two kinds of evidence (diagnosis/engine/straggle.py):
members found late inside a group, and groups whose pace fell behind. The detectors' findings
are given as they come out of ``judge_rings`` and ``GroupPace.judge`` on a made-up job of two
hosts of four GPUs (their tensor-parallel groups) tied by data-parallel pairs."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.engine import straggle
from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.pace import SlowGroup
from diagnosis.engine.slow import SlowRank
from diagnosis.engine.straggle import SampledStragglers
from diagnosis.engine.timing import GroupTiming

T0 = 10_000_000_000
TP0 = 0      # the first group added: host 0's tensor-parallel group


def stragglers(monkeypatch: pytest.MonkeyPatch, late: list[SlowRank],
               behind: list[SlowGroup]) -> SampledStragglers:
    arena = Arena(16)
    for k in range(2):
        arena.add_group(k, f"tp{k}", np.arange(4 * k, 4 * k + 4))
    for i in range(4):
        arena.add_group(100 + i, f"dp{i}", np.array([i, 4 + i]))
    cfg = EngineConfig()
    st = SampledStragglers(arena, GroupTiming(arena, cfg), cfg)
    monkeypatch.setattr(straggle, "judge_rings", lambda *a, **k: list(late))
    monkeypatch.setattr(st.pace, "judge", lambda: list(behind))
    return st


def rank_late(rank: int, group: int, excess: float, duty: float | None) -> SlowRank:
    return SlowRank(rank, group, T0, excess, excess * 1e6, 20, 0.1 if duty else 0.9, 0.01,
                    -12.0, duty=duty, episodes=3 if duty else 0)


def test_a_host_behind_from_a_change_point_is_not_explained_by_a_member_paused_now_and_then(
        monkeypatch):
    """A host 2x slower from some moment on, one of whose GPUs also paused a few times (late
    in 5% of its samples, by more than the pace's excess when it did): the pauses do not
    explain a pace held back all along, and its GPUs are no victims of them."""
    st = stragglers(monkeypatch, [rank_late(1, 0, 0.6, 0.05)],
                        [SlowGroup(TP0, T0, 0.9, 20, 0.95, -30.0)])
    assert sorted({f.rank for f in st.judge()}) == [0, 1, 2, 3]


def test_a_gpu_late_all_along_explains_its_group_falling_behind(monkeypatch):
    st = stragglers(monkeypatch, [rank_late(1, 0, 0.6, None)],
                        [SlowGroup(TP0, T0, 0.9, 20, 0.95, -30.0)])
    assert [f.rank for f in st.judge()] == [1]


def test_a_gpu_found_late_by_less_than_the_least_excess_still_explains_its_group(monkeypatch):
    """A GPU an eighth slower whose ring holds no sample from before its onset any more (a run
    longer than the ring): its test finds it late by 2.6%, under ``straggle_min_excess``, and
    its group behind by 8%. Found late, it explains its group's pace, and its host is not
    named. Not found, the same lateness in its ring alone would not."""
    behind = [SlowGroup(TP0, T0, 0.08, 20, 0.95, -30.0)]
    st = stragglers(monkeypatch, [rank_late(1, 0, 0.026, None)], behind)
    assert [f.rank for f in st.judge()] == [1]
    st = stragglers(monkeypatch, [], behind)
    monkeypatch.setattr(st, "_late_by", lambda g, since: 0.026)
    assert sorted(f.rank for f in st.judge()) == [0, 1, 2, 3]


def test_a_gpu_late_now_and_then_explains_its_group_behind_now_and_then(monkeypatch):
    st = stragglers(monkeypatch, [rank_late(1, 0, 0.6, 0.3)],
                        [SlowGroup(TP0, T0, 0.9, 20, 0.3, -30.0, duty=0.3, episodes=5)])
    assert [f.rank for f in st.judge()] == [1]


def test_of_the_stages_of_one_pipeline_waited_for_the_first_and_strongest_is_the_cause(
        monkeypatch):
    """Progress snapshots show the replicas of two stages of one pipeline waiting for them
    (``waits``): the slow one, and the stage that drains its backward pass after it, which
    starts its last backward late. Seen from the same snapshot on, the stronger evidence is
    the cause; the other is its victim. A stage of another pipeline stays a finding of its
    own."""
    from diagnosis.engine.waits import Waited
    st = stragglers(monkeypatch, [], [])
    # a pipeline: rank 1 (host 0) sends to rank 5 (host 1); ranks 2 and 6 in no pipeline
    st.arena.channels(np.array([7]), np.array([1]), np.array([5]), [f"pg{i}" for i in range(8)])
    dp1, dp2 = 3, 4     # the groups dp1 (ranks 1, 5) and dp2 (ranks 2, 6)
    found = [Waited(5, dp1, T0, 7, 7, 0.0, 23, 0.3, -24.5),
             Waited(1, dp1, T0, 4, 6, 0.0, 22, 0.18, -11.4),
             Waited(6, dp2, T0 + 3, 3, 6, 0.0, 20, 0.15, -9.0)]
    monkeypatch.setattr(st.waits, "judge", lambda: list(found))
    assert sorted(f.rank for f in st.judge()) == [5, 6]


def test_of_the_stages_of_one_pipeline_waited_for_the_one_its_neighbours_wait_for_is_the_cause(
        monkeypatch):
    """The stage at the far end of a slow stage's backward pass gathers every delay before
    it: its replicas wait for it from earlier on, and more, than for the slow stage. What
    tells them apart is the pipeline itself: the slow stage's neighbours wait for it inside
    their transfers (``WaitBoard.held``), the far stage's do not."""
    from diagnosis.engine.waits import Waited
    st = stragglers(monkeypatch, [], [])
    st.arena.channels(np.array([7]), np.array([1]), np.array([5]), [f"pg{i}" for i in range(8)])
    dp1 = 3
    found = [Waited(1, dp1, T0, 7, 9, 0.0, 30, 0.3, -21.0),          # the far stage
             Waited(5, dp1, T0 + 5, 6, 7, 0.0, 24, 0.25, -19.1)]     # the slow one
    monkeypatch.setattr(st.waits, "judge", lambda: list(found))
    assert [f.rank for f in st.judge()] == [1]      # nothing else known: the first
    st.waits._grow_busy(np.array([7]))
    st.waits.held_p2p[5] = 10                       # its neighbour waited for it 10 times more
    assert [f.rank for f in st.judge()] == [5]


def test_a_gpu_late_a_little_now_and_then_does_not_make_its_host_mates_victims(monkeypatch):
    """Every GPU of host 1 is waited for by its data-parallel replica most of the time (a slow
    host); one of them is also late in its tensor-parallel group now and then, by little. That
    does not explain why the replicas wait for the others: they are no victims of it. A GPU
    late in every call of its group would."""
    from diagnosis.engine.waits import Waited
    waits = [Waited(4 + i, 2 + i, T0, 6, 7, 0.0, 24, 0.25, -19.1) for i in range(4)]
    st = stragglers(monkeypatch, [rank_late(7, 1, 0.07, 0.07)], [])
    monkeypatch.setattr(st.waits, "judge", lambda: list(waits))
    assert sorted({f.rank for f in st.judge()}) == [4, 5, 6, 7]
    st = stragglers(monkeypatch, [rank_late(7, 1, 0.6, None)], [])
    monkeypatch.setattr(st.waits, "judge", lambda: list(waits))
    assert sorted({f.rank for f in st.judge()}) == [7]


def test_a_stage_waited_for_after_its_pipeline_had_a_slow_stage_is_its_victim(monkeypatch):
    """Rank 1 is late in its tensor-parallel group from the start (a slow stage, found by the
    kept calls); rank 6, the stage its backward pass drains into, is waited for by its replica
    from later on: its victim. The same stage in another pipeline is judged on its own."""
    from diagnosis.engine.waits import Waited
    late = SlowRank(1, TP0, T0, 0.8, 0.8e6, 20, 0.7, 0.01, -15.0, duty=0.7, episodes=5)
    waited = [Waited(6, 4, T0 + 5, 6, 7, 0.0, 24, 0.25, -19.1)]     # in dp2 (ranks 2, 6)
    for sender, expect in ((1, [1]), (3, [1, 6])):
        st = stragglers(monkeypatch, [late], [])
        st.arena.channels(np.array([7]), np.array([sender]), np.array([6]),
                          [f"pg{i}" for i in range(8)])
        monkeypatch.setattr(st.waits, "judge", lambda: list(waited))
        assert sorted({f.rank for f in st.judge()}) == expect
