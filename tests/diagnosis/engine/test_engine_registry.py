"""The engine's report registry: updates in place, re-opened slow faults, new hang incidents."""

from __future__ import annotations

from c4.report import FaultReport, Suspect
from diagnosis.engine.registry import Registry


def _report(kind: str, fid: str, first: int, summary: str = "s") -> FaultReport:
    return FaultReport(kind, (Suspect("nic", "node001/nic0", 1.0),), first, summary, id=fid)


def test_new_evidence_updates_the_open_report():
    reg = Registry()
    assert reg.put(_report("comm_hang", "h", 100), now=100) == "h"
    assert reg.put(_report("comm_hang", "h", 90, "more"), now=200, renew=True) == "h"
    r = reg.get("h")
    assert (r.revision, r.first_seen_ns, r.summary, r.state) == (1, 90, "more", "open")


def test_a_hang_after_a_resolved_one_is_a_new_incident():
    reg = Registry()
    reg.put(_report("comm_hang", "h", 100), now=100, renew=True)
    reg.resolve("h", now=150, why="the waiting call finished")
    assert reg.put(_report("comm_hang", "h", 900), now=900, renew=True) == "h#2"
    new = reg.get("h")
    assert (new.id, new.first_seen_ns, new.revision, new.state) == ("h#2", 900, 0, "open")
    assert reg.open_ids("comm_hang") == ["h#2"]
    assert [r.state for r in reg.all()] == ["resolved", "open"]
    # updates and resolution by the base id reach the latest incident
    assert reg.put(_report("comm_hang", "h", 950, "later"), now=1000, renew=True) == "h#2"
    reg.resolve("h", now=1100, why="the waiting call finished")
    assert reg.get("h#2").state == "resolved"
    assert reg.put(_report("comm_hang", "h", 2000), now=2000, renew=True) == "h#3"


def test_a_slow_fault_that_comes_back_reopens_its_report():
    reg = Registry()
    reg.put(_report("comm_slow", "s", 100), now=100)
    reg.resolve("s", now=150, why="back to baseline")
    assert reg.put(_report("comm_slow", "s", 900), now=900) == "s"
    r = reg.get("s")
    assert (r.state, r.first_seen_ns, r.revision) == ("open", 100, 2)
