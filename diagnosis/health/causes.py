"""Findings joined to timing: each ``noncomm_slow``, ``comm_slow``, hang and error report gets
the findings on its suspects and their hosts over the fault's window as ``causes``; hard
findings become ``health`` reports of their own.

A finding is a cause of a report only if (1) it can explain that kind of fault (a port down
explains a slow transfer, not a late GPU), (2) it is on a suspect (or the suspect's host, or a
component of a suspected host) and (3) it overlaps the fault's window (from ``lookback_ns``
before the fault was first seen to when it was last seen). Attaching happens at the report
level: the detectors never see health.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from c4.report import FaultReport, Suspect
from diagnosis.health.findings import Finding

S = 1_000_000_000
_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
#: the timing kinds causes are attached to
TIMING_KINDS = frozenset({"noncomm_slow", "comm_slow", "noncomm_hang", "comm_hang", "error"})


@dataclass(frozen=True)
class JoinConfig:
    #: a finding that began this long before the fault may still be its cause
    lookback_ns: int = 300 * S
    #: an open fault's window reaches this long past its last sighting
    lookahead_ns: int = 60 * S
    #: most causes kept per report
    max_causes: int = 3


def _targets(s: Suspect, rank_places: Mapping[int, tuple[str, ...]]) -> dict[str, float]:
    """The topology ids a suspect covers, with how strongly a finding there implicates it."""
    if s.type == "rank":
        places = rank_places.get(s.rank if s.rank is not None else int(s.id), ())
        out = {p: 1.0 for p in places[1:]}
        if places:
            out[places[0]] = 0.8    # the rank's host
        return out
    if s.type == "link":
        out = {}
        for end in s.id.split("~"):
            out[end] = 1.0
            if "/" in end:
                out.setdefault(end.split("/", 1)[0], 0.6)
        return out
    if s.type in ("gpu", "nic"):
        return {s.id: 1.0, s.id.split("/", 1)[0]: 0.8}
    return {s.id: 1.0}          # host, switch


def causes_for(report: FaultReport, findings: Iterable[Finding], *,
               rank_places: Mapping[int, tuple[str, ...]] | None = None,
               config: JoinConfig | None = None) -> list[dict]:
    """The causes of one report (most likely first), as the dicts FaultReport.causes holds."""
    cfg = config or JoinConfig()
    if report.kind not in TIMING_KINDS:
        return []
    places = rank_places or {}
    lo = report.first_seen_ns - cfg.lookback_ns
    hi = max(report.last_seen_ns, report.first_seen_ns) + cfg.lookahead_ns
    scored: list[tuple[float, Finding]] = []
    for f in findings:
        if report.kind not in f.explains or f.last_ns < lo or f.first_ns > hi:
            continue
        best = 0.0
        for rank_i, s in enumerate(report.suspects):
            targets = _targets(s, places)
            # a host suspect covers its components; a finding on a component of it counts
            strength = targets.get(f.target, 0.0)
            if not strength and s.type == "host" and f.host == s.id:
                strength = 0.9
            if not strength and f.target == f.host and f.host in targets:
                strength = targets[f.host]
            best = max(best, strength * s.score / (1 + 0.25 * rank_i))
        if best > 0:
            # a rule says what is wrong; the peer model only that the component is odd
            weight = 0.9 if f.kind == "peer_outlier" else 1.0
            scored.append((best * weight + 0.1 * _SEVERITY_RANK[f.severity] + 0.05 * f.hard, f))
    scored.sort(key=lambda x: (-x[0], x[1].first_ns))
    # the peer model's view of a component a rule already explains goes into that cause
    peers = {f.target: f for _, f in scored if f.kind == "peer_outlier"}
    explained = {f.target for _, f in scored if f.kind != "peer_outlier"}
    out = []
    for score, f in scored:
        if f.kind == "peer_outlier" and f.target in explained:
            continue
        cause = _cause(f, score)
        peer = peers.get(f.target) if f.kind != "peer_outlier" else None
        if peer is not None:
            cause["summary"] += "; " + peer.summary
            cause["evidence"] = {**cause["evidence"], "peers": peer.evidence}
        out.append(cause)
    return out[:cfg.max_causes]


def _cause(f: Finding, score: float) -> dict:
    return {"kind": f.kind, "target": f.target, "summary": f.summary, "action": f.action,
            "severity": f.severity, "hard": f.hard, "since_ns": int(f.first_ns),
            "until_ns": int(f.last_ns), "score": round(min(score, 1.0), 3),
            "evidence": f.evidence}


def attach_causes(reports: Iterable[FaultReport], findings: list[Finding], *,
                  rank_places: Mapping[int, tuple[str, ...]] | None = None,
                  config: JoinConfig | None = None) -> list[FaultReport]:
    """``reports`` with their causes set (a report without causes comes back unchanged)."""
    out = []
    for r in reports:
        causes = causes_for(r, findings, rank_places=rank_places, config=config)
        out.append(r.with_updates(causes=tuple(causes)) if causes else r)
    return out


def _suspect_type(target: str, host: str) -> str:
    if target == host or "/" not in target:
        return "host"
    return "gpu" if "/gpu" in target else "nic"


def health_reports(findings: Iterable[Finding], job: str = "") -> list[FaultReport]:
    """One ``health`` report per hard finding: the evidence a node gave about itself."""
    out = []
    for f in findings:
        if not f.hard:
            continue
        out.append(FaultReport(
            kind="health",
            suspects=(Suspect(_suspect_type(f.target, f.host), f.target, 1.0),),
            first_seen_ns=f.first_ns, last_seen_ns=f.last_ns, job=job,
            summary=f"{f.target}: {f.summary}; {f.action}",
            evidence={"finding": f.kind, "severity": f.severity, "action": f.action,
                      **f.evidence}))
    return out
