"""When a comm_slow finding becomes a report: one slow observation explained only by ECMP
alternatives waits a pass; a finding resting on paths no alternative could explain does not."""

from __future__ import annotations

from diagnosis.engine import Engine
from diagnosis.engine.localize import CommFinding
from diagnosis.engine.tomography import Component, Explanation

UPLINKS = [Component("link", "leaf00~spine0"), Component("link", "leaf01~spine0")]
CABLE = [Component("nic", "node003/nic0"), Component("link", "leaf01~node003/nic0")]


def _finding(comps, sure: bool, observations=("0:3>7",)) -> CommFinding:
    return CommFinding(Explanation(list(comps), list(range(len(observations))), 0, 1.0),
                       onset_ns=1, slowdown=3.0, observations=list(observations), healthy=8,
                       via="communicators", ends=[frozenset({3, 7})] * len(observations),
                       sure=sure)


def _open(eng: Engine) -> list[str]:
    return eng.reporter.open_ids("comm_slow")


def test_one_observation_on_ecmp_alternatives_waits_a_pass():
    eng = Engine()
    eng.slow_reports.comm([_finding(UPLINKS, sure=False)], now=10)
    assert _open(eng) == []
    eng.slow_reports.comm([_finding(UPLINKS, sure=False)], now=20)
    assert _open(eng) == ["comm_slow:link:leaf00~spine0"]


def test_held_finding_that_moves_to_the_cable_is_reported_on_the_cable_only():
    # the next pass has more slow observations, and they rest on the cable
    eng = Engine()
    eng.slow_reports.comm([_finding(UPLINKS, sure=False)], now=10)
    eng.slow_reports.comm([_finding(CABLE, sure=True, observations=("0:3>7", "2"))], now=20)
    assert _open(eng) == ["comm_slow:nic:node003/nic0"]


def test_sure_or_repeated_evidence_is_reported_at_once():
    eng = Engine()
    eng.slow_reports.comm([_finding(CABLE, sure=True)], now=10)
    assert _open(eng) == ["comm_slow:nic:node003/nic0"]
    eng = Engine()
    eng.slow_reports.comm([_finding(UPLINKS, sure=False, observations=("0:3>7", "0:2>6"))],
                          now=10)
    assert _open(eng) == ["comm_slow:link:leaf00~spine0"]
