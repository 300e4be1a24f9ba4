"""The daemon's health join: a report filed before its cause was seen gets the cause when the
finding comes (the detectors need not revise it); closed reports and other hosts' findings do
not bring it back."""

from __future__ import annotations

from c4.proto.health import HealthRecord
from c4.report import FaultReport, Suspect
from diagnosis.health.live import LiveHealth

S = 1_000_000_000
T0 = 1_700_000_000 * S


def _slow(host: str = "node3", state: str = "open") -> FaultReport:
    return FaultReport("noncomm_slow", (Suspect("host", host, 1.0),), T0, "slow",
                       last_seen_ns=T0 + 20 * S, id=f"noncomm_slow:{host}", state=state)


def _psi(host: str, t: int, pct: float) -> HealthRecord:
    return HealthRecord(host, t, host, {"psi_cpu_some_avg10": pct})


def test_a_cause_found_after_the_report_is_filed_comes_with_a_revisit() -> None:
    health = LiveHealth()
    health.add("j", [_psi("node3", T0, 5.0)])            # pressure not yet over the rule
    report = _slow()
    assert health.explain("j", report).causes == ()
    assert health.revisit("j") == []                       # nothing new: nothing to file
    health.add("j", [_psi("node3", T0 + 10 * S, 45.0)])
    [again] = health.revisit("j")
    assert again.id == report.id and again.summary == report.summary
    assert [(c["kind"], c["target"]) for c in again.causes] == [("cpu_pressure", "node3")]
    assert health.revisit("j") == []                       # filed once, not every pass
    health.add("j", [_psi("node3", T0 + 12 * S, 50.0)])  # the same episode goes on
    assert health.revisit("j") == []


def test_other_hosts_findings_and_closed_reports_file_nothing() -> None:
    health = LiveHealth()
    health.explain("j", _slow())
    health.add("j", [_psi("node4", T0 + 10 * S, 45.0)])   # another host's pressure
    assert health.revisit("j") == []
    health.explain("j", _slow(state="resolved"))          # the detectors closed it
    health.add("j", [_psi("node3", T0 + 11 * S, 45.0)])
    assert health.revisit("j") == []
    assert health.revisit("other job") == []


def test_forget_drops_the_jobs_reports() -> None:
    health = LiveHealth()
    health.explain("j", _slow())
    health.forget("j")
    health.add("j", [_psi("node3", T0 + 10 * S, 45.0)])
    assert health.revisit("j") == []
