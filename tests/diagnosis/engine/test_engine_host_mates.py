"""A slow GPU and the host-mates found slow beside it (``SlowReports.noncomm``,
diagnosis/engine/slow_reports.py): a slow host slows its GPUs alike, so host-mates found with a
small fraction of a GPU's excess are its side effect (it takes their CPU, or their share of the
host's links) and the GPU is named; host-mates slowed alike name the host."""

from __future__ import annotations

import pytest

from diagnosis.engine import Engine
from diagnosis.engine.slow import SlowRank

T0 = 10_000_000_000


def engine() -> Engine:
    # 4 hosts x 2 GPUs; data-parallel groups across hosts, one per local GPU
    eng = Engine()
    for r in range(8):
        eng.add_rank(r, f"node{r // 2:03d}", f"node{r // 2:03d}/gpu{r % 2}")
    eng.add_group("dp.0", range(0, 8, 2))
    eng.add_group("dp.1", range(1, 8, 2))
    return eng


def found(eng: Engine, excess: dict[int, float]) -> list[SlowRank]:
    """Each rank found late on its own, by ``excess`` (relative), with strong evidence."""
    return [SlowRank(r, eng.arena.names.index(f"dp.{r % 2}"), T0, x, x * 30e6, 20, 0.9, 0.01,
                     -40.0) for r, x in excess.items()]


def _open(eng: Engine) -> list[str]:
    return sorted(eng.reporter.open_ids("noncomm_slow"))


def test_a_gpu_many_times_slower_than_its_host_mate_is_named_not_the_host():
    eng = engine()
    eng.slow_reports.noncomm(found(eng, {5: 1.0, 4: 0.1}), now=T0)
    assert _open(eng) == ["noncomm_slow:rank:5"]


@pytest.mark.parametrize("mate", [0.5, 1.0])
def test_host_mates_slowed_alike_name_the_host(mate):
    eng = engine()
    eng.slow_reports.noncomm(found(eng, {5: 1.0, 4: mate}), now=T0)
    assert _open(eng) == ["noncomm_slow:host:node002"]


def test_host_mates_found_one_pass_apart_name_the_host():
    # the lab's CPU contention on a host of two: one GPU's report, then its host-mate's, both
    # open and alike (42% and 53%), never found at one pass
    eng = engine()
    eng.slow_reports.noncomm(found(eng, {4: 0.42}), now=T0)
    assert _open(eng) == ["noncomm_slow:rank:4"]
    eng.slow_reports.noncomm(found(eng, {5: 0.53}), now=T0 + 3 * 10**9)
    assert _open(eng) == ["noncomm_slow:host:node002"]
    assert eng.reporter.get("noncomm_slow:rank:4").state != "open"


def test_a_host_mate_found_after_a_gpu_many_times_slower_is_its_side_effect():
    eng = engine()
    eng.slow_reports.noncomm(found(eng, {5: 1.0}), now=T0)
    eng.slow_reports.noncomm(found(eng, {4: 0.1}), now=T0 + 3 * 10**9)
    assert _open(eng) == ["noncomm_slow:rank:5"]


def test_a_gpu_whose_report_was_withdrawn_does_not_join_its_host_mate():
    eng = engine()
    eng.slow_reports.noncomm(found(eng, {4: 0.5}), now=T0)
    passes = eng.cfg.slow_unconfirmed_passes
    for i in range(1, passes + 1):
        eng.slow_reports.noncomm([], now=T0 + i * 3 * 10**9)
    assert _open(eng) == []
    eng.slow_reports.noncomm(found(eng, {5: 0.5}), now=T0 + (passes + 1) * 3 * 10**9)
    assert _open(eng) == ["noncomm_slow:rank:5"]
