"""A stage slow all along holds back the stages it exchanges with (``SampledStragglers.judge``,
diagnosis/engine/straggle.py): a group behind only now and then in its pipeline is its victim,
not a second fault, while the same finding in another pipeline still is one. The detectors'
findings are given as ``judge_rings`` and ``GroupPace.judge`` give them, on a made-up job of two
pipelines of three stages, each stage a host's tensor-parallel group of four, whose members
send to the same member of the next stage (as bench.accuracy.hard's start-slow_host-512-3 at
K = 16: host node053's stage slow 2.7x, host node055 two stages down behind in 12% of its
buckets, reported as a second slow host)."""

from __future__ import annotations

from dataclasses import replace

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
STAGES, PIPELINES, TP = 3, 2, 4


def tp_group(pipeline: int, stage: int) -> int:
    """The arena index of a stage's tensor-parallel group (added first, in this order)."""
    return pipeline * STAGES + stage


def stragglers(monkeypatch: pytest.MonkeyPatch, behind: list[SlowGroup],
               late: list[SlowRank] = ()) -> SampledStragglers:
    arena = Arena(16)
    names = []
    for p in range(PIPELINES):
        for s in range(STAGES):
            k = tp_group(p, s)
            names.append(f"tp.{k}")
            arena.add_group(k, f"tp.{k}", np.arange(TP * k, TP * k + TP))
    for p in range(PIPELINES):       # stage s member i sends to stage s+1 member i
        pg = len(names)
        names.append(f"pp.{p}")
        src = np.array([TP * tp_group(p, s) + i for s in range(STAGES - 1) for i in range(TP)])
        arena.channels(np.full(len(src), pg), src, src + TP, names)
    cfg = EngineConfig()
    st = SampledStragglers(arena, GroupTiming(arena, cfg), cfg)
    monkeypatch.setattr(straggle, "judge_rings", lambda *a, **k: list(late))
    monkeypatch.setattr(st.pace, "judge", lambda: list(behind))
    return st


def slow_all_along(g: int) -> SlowGroup:
    return SlowGroup(g, T0, 1.58, 34, 0.94, -82.0)


def now_and_then(g: int) -> SlowGroup:
    return SlowGroup(g, T0 + 10**10, 0.92, 25, 0.12, -13.0, duty=0.12, episodes=3,
                     every_ns=1e9)


def ranks_of(found: list[SlowRank]) -> list[int]:
    return sorted({f.rank for f in found})


def test_a_stage_behind_now_and_then_in_the_pipeline_of_a_slow_stage_is_its_victim(
        monkeypatch):
    st = stragglers(monkeypatch, [slow_all_along(tp_group(0, 0)),
                                  now_and_then(tp_group(0, 2))])
    assert ranks_of(st.judge()) == list(range(TP))


def test_the_same_finding_in_another_pipeline_is_a_second_fault(monkeypatch):
    st = stragglers(monkeypatch, [slow_all_along(tp_group(0, 0)),
                                  now_and_then(tp_group(1, 2))])
    other = TP * tp_group(1, 2)
    assert ranks_of(st.judge()) == list(range(TP)) + list(range(other, other + TP))


def test_a_stage_slow_all_along_beside_another_is_judged_on_its_own(monkeypatch):
    """Two stages of one pipeline each slow from a change point on: a victim's waits come and
    go with the buckets, a level is its own."""
    st = stragglers(monkeypatch, [slow_all_along(tp_group(0, 0)),
                                  slow_all_along(tp_group(0, 2))])
    late = TP * tp_group(0, 2)
    assert ranks_of(st.judge()) == list(range(TP)) + list(range(late, late + TP))


def test_a_gpu_late_all_along_holds_its_pipeline_back_too(monkeypatch):
    """A slow GPU is found late inside its group, not by the group's pace; the stages it holds
    back are its victims all the same."""
    gpu = SlowRank(1, tp_group(0, 0), T0, 0.6, 0.6e6, 20, 0.9, 0.01, -40.0)
    st = stragglers(monkeypatch, [now_and_then(tp_group(0, 2))], late=[gpu])
    assert ranks_of(st.judge()) == [1]


def test_without_a_stage_slow_all_along_a_stage_behind_now_and_then_is_found(monkeypatch):
    st = stragglers(monkeypatch, [now_and_then(tp_group(0, 2))])
    late = TP * tp_group(0, 2)
    assert ranks_of(st.judge()) == list(range(late, late + TP))


def test_a_stage_behind_far_less_than_another_of_its_pipeline_is_its_victim(monkeypatch):
    """A stage 2x slow from a change point on, and its neighbour behind 7% from a little
    later (it waits for the slow one at other moments than its replicas do), as
    bench.accuracy.run's slow_host-512-0 at K = 64 showed it: one host, not two."""
    victim = SlowGroup(tp_group(0, 1), T0 + 4 * 10**9, 0.07, 8, 0.9, -11.0)
    st = stragglers(monkeypatch, [SlowGroup(tp_group(0, 0), T0, 0.89, 8, 1.0, -24.0), victim])
    assert ranks_of(st.judge()) == list(range(TP))
    # the same in another pipeline is a second fault
    other = replace(victim, group=tp_group(1, 1))
    st = stragglers(monkeypatch, [SlowGroup(tp_group(0, 0), T0, 0.89, 8, 1.0, -24.0), other])
    first = TP * tp_group(1, 1)
    assert ranks_of(st.judge()) == list(range(TP)) + list(range(first, first + TP))


def test_a_stage_behind_far_less_than_one_slow_from_the_start_is_its_victim(monkeypatch):
    """The same beside a stage slow from the first iteration, 1.8x (bench.accuracy.hard's
    start-slow_host-512-0 at K = 64): no change point, it is behind in 73% of its buckets
    since its first episode; its neighbour two stages up, 6% behind from mid-run, is its
    victim, not a second slow host."""
    slow = SlowGroup(tp_group(0, 2), T0, 0.74, 11, 0.73, -32.0, duty=0.73, episodes=3,
                     every_ns=2e9)
    victim = SlowGroup(tp_group(0, 0), T0 + 8 * 10**9, 0.06, 5, 1.0, -17.5)
    st = stragglers(monkeypatch, [slow, victim])
    first = TP * tp_group(0, 2)
    assert ranks_of(st.judge()) == list(range(first, first + TP))
    # one behind in a third of its buckets does not make it one
    seldom = replace(slow, duty=0.3)
    assert set(range(TP)) <= set(ranks_of(stragglers(monkeypatch, [seldom, victim]).judge()))


def test_its_peers_waiting_for_a_member_does_not_explain_a_group_behind(monkeypatch):
    """A group behind its replicas whose member its peers wait for at progress snapshots
    (``waits``): the snapshots show the same slowness, no member late inside the group, so
    the group's pace, with its onset, makes the finding."""
    g = tp_group(0, 0)
    st = stragglers(monkeypatch, [SlowGroup(g, T0 + 5 * 10**9, 0.89, 8, 1.0, -24.0)])
    waited = SlowRank(0, g, T0 - 10**9, 0.7, 0.7e6, 17, 0.4, 0.0, -12.0, waits=(7, 17, 17))
    monkeypatch.setattr(st, "_waited", lambda *a: [waited])
    found = st.judge()
    assert ranks_of(found) == list(range(TP))
    assert {f.onset_ns for f in found} == {T0 + 5 * 10**9}
    assert all(f.whole_group for f in found)
