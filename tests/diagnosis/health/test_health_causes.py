"""Findings joined to timing reports: the right cause on the right report, decoys left out."""

from __future__ import annotations

from c4.report import FaultReport, Suspect
from c4.report_proto import from_proto, to_proto
from diagnosis.health.causes import attach_causes, causes_for
from diagnosis.health.findings import Finding

S = 1_000_000_000
T0 = 1_700_000_000 * S


def _f(kind: str, target: str, t: int = T0, hard: bool = False) -> Finding:
    return Finding(kind, target, target.split("/")[0], t, t + 60 * S, "warning", hard,
                   f"{kind} on {target}", "do something")


def _slow(kind: str, *suspects: Suspect) -> FaultReport:
    return FaultReport(kind, suspects, T0 + 30 * S, "slow", last_seen_ns=T0 + 90 * S)


def test_cause_on_the_suspect_and_decoy_elsewhere() -> None:
    rep = _slow("noncomm_slow", Suspect("gpu", "node3/gpu1", 0.9))
    findings = [_f("thermal_slowdown", "node3/gpu1"), _f("thermal_slowdown", "node5/gpu1"),
                _f("port_down", "node3/nic0", hard=True)]
    [c] = causes_for(rep, findings)
    assert (c["kind"], c["target"]) == ("thermal_slowdown", "node3/gpu1")


def test_host_pressure_explains_a_slow_gpu_on_that_host() -> None:
    rep = _slow("noncomm_slow", Suspect("gpu", "node3/gpu1", 1.0))
    [c] = causes_for(rep, [_f("cpu_pressure", "node3"), _f("cpu_pressure", "node4")])
    assert c["target"] == "node3" and c["kind"] == "cpu_pressure"


def test_link_suspect_takes_nic_findings_and_window_is_respected() -> None:
    rep = _slow("comm_slow", Suspect("link", "leaf1~node3/nic0", 0.8))
    early = _f("ib_errors", "node3/nic0", t=T0 - 3_600 * S)
    now = _f("ib_errors", "node3/nic0")
    assert causes_for(rep, [early]) == []
    [c] = causes_for(rep, [early, now])
    assert c["since_ns"] == now.first_ns


def test_rank_suspect_through_its_placement() -> None:
    rep = _slow("noncomm_slow", Suspect("rank", "7", 1.0, rank=7))
    places = {7: ("node3", "node3/gpu1", "node3/nic0")}
    [c] = causes_for(rep, [_f("thermal_slowdown", "node3/gpu1")], rank_places=places)
    assert c["target"] == "node3/gpu1"


def test_health_reports_get_no_causes_and_causes_survive_json_and_proto() -> None:
    rep = _slow("noncomm_slow", Suspect("gpu", "node3/gpu1", 0.9))
    [with_cause] = attach_causes([rep], [_f("thermal_slowdown", "node3/gpu1")])
    assert FaultReport.from_json(with_cause.to_json()).causes == with_cause.causes
    back = from_proto(to_proto(with_cause.with_updates(id="f1", job="j")))
    assert back.causes[0]["kind"] == "thermal_slowdown"
    health = FaultReport("health", (Suspect("gpu", "node3/gpu1", 1.0),), T0, "x")
    assert causes_for(health, [_f("thermal_slowdown", "node3/gpu1")]) == []
