"""A group behind its replicas because its own transfers slowed (``SlowReports.noncomm``,
diagnosis/engine/slow_reports.py): with one call in 64 kept, a group's spans between kept calls
run over its own transfers, so a slow leaf puts the groups of the hosts under it behind by a few
percent from its onset on. Such a group, with a member at an end of a connection an open
``comm_slow`` report lists, is that report's symptom, not a slow host; a host behind by more
than the network slowed its traffic, or from before, still is one."""

from __future__ import annotations

from diagnosis.engine import Engine
from diagnosis.engine.localize import CommFinding
from diagnosis.engine.slow import SlowRank
from diagnosis.engine.tomography import Component, Explanation

T0 = 50_000_000_000
SECOND = 1_000_000_000
LEAF = [Component("switch", "leaf03")]


def engine() -> Engine:
    # 4 hosts x 2 GPUs: a tensor-parallel group per host, data-parallel groups across hosts
    eng = Engine()
    for r in range(8):
        eng.add_rank(r, f"node{r // 2:03d}", f"node{r // 2:03d}/gpu{r % 2}")
    for h in range(4):
        eng.add_group(f"tp.{h}", [2 * h, 2 * h + 1])
    eng.add_group("dp.0", range(0, 8, 2))
    eng.add_group("dp.1", range(1, 8, 2))
    return eng


def slow_leaf(eng: Engine, slowdown: float = 2.6, conns: tuple[str, ...] = ("1>7",)) -> None:
    """An open comm_slow report: the connections ``conns`` cross the slow leaf."""
    ends = [frozenset(int(r) for r in c.split(">")) for c in conns]
    finding = CommFinding(Explanation(list(LEAF), list(range(len(conns))), 0, 1.0),
                          onset_ns=T0, slowdown=slowdown, observations=list(conns), healthy=30,
                          via="connections", ends=ends)
    eng.slow_reports.comm([finding], now=T0 + 2 * SECOND)
    assert eng.reporter.open_ids("comm_slow") == ["comm_slow:switch:leaf03"]


def group_behind(eng: Engine, host: int, excess: float, onset_ns: int,
                 every_ns: float = 0.0) -> list[SlowRank]:
    """Host ``host``'s tensor-parallel group behind its replicas from a change point on (its
    pace's buckets ``every_ns`` apart)."""
    g = eng.arena.names.index(f"tp.{host}")
    return [SlowRank(r, g, onset_ns, excess, excess * 4e6, 20, 0.9, 0.01, -30.0,
                     every_ns=every_ns, whole_group=True) for r in (2 * host, 2 * host + 1)]


def hosts_reported(eng: Engine) -> list[str]:
    return sorted(eng.reporter.open_ids("noncomm_slow"))


def test_a_group_behind_a_slow_leaf_by_a_little_is_its_symptom():
    eng = engine()
    slow_leaf(eng)
    eng.slow_reports.noncomm(group_behind(eng, 0, 0.09, T0 + 3 * SECOND), T0 + 8 * SECOND,
                             sample=64)
    assert hosts_reported(eng) == []


def test_a_host_behind_by_more_than_the_network_slowed_is_reported():
    eng = engine()
    slow_leaf(eng, slowdown=1.2)
    eng.slow_reports.noncomm(group_behind(eng, 0, 0.5, T0 + 3 * SECOND), T0 + 8 * SECOND,
                             sample=64)
    assert hosts_reported(eng) == ["noncomm_slow:host:node000"]


def test_a_host_behind_from_before_the_network_slowed_is_reported():
    eng = engine()
    slow_leaf(eng)
    eng.slow_reports.noncomm(group_behind(eng, 0, 0.09, T0 - 20 * SECOND), T0 + 8 * SECOND,
                             sample=64)
    assert hosts_reported(eng) == ["noncomm_slow:host:node000"]


def test_a_group_whose_buckets_span_longer_than_its_seeming_lead_is_a_symptom():
    """At K = 256 a group's pace buckets are 12 s apart: its onset, a bucket's start, may come
    8 s before the slow leaf's; with 2 s buckets that lead is the host's own."""
    eng = engine()
    slow_leaf(eng)
    eng.slow_reports.noncomm(group_behind(eng, 0, 0.09, T0 - 8 * SECOND, every_ns=12 * SECOND),
                             T0 + 8 * SECOND, sample=256)
    assert hosts_reported(eng) == []
    eng = engine()
    slow_leaf(eng)
    eng.slow_reports.noncomm(group_behind(eng, 0, 0.09, T0 - 8 * SECOND, every_ns=2 * SECOND),
                             T0 + 8 * SECOND, sample=64)
    assert hosts_reported(eng) == ["noncomm_slow:host:node000"]


def test_a_host_none_of_whose_connections_is_slow_is_reported():
    # host node001 (ranks 2, 3) is no end of the slow connection 1>7
    eng = engine()
    slow_leaf(eng)
    eng.slow_reports.noncomm(group_behind(eng, 1, 0.09, T0 + 3 * SECOND), T0 + 8 * SECOND,
                             sample=64)
    assert hosts_reported(eng) == ["noncomm_slow:host:node001"]
