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
