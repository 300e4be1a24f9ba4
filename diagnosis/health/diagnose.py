"""The whole health pass over a job's records: rules → findings, the peer model around each
timing fault, causes attached to the timing reports, and a ``health`` report per hard finding.
Used by ``c4 analyze`` on a trace and by the simulator's accuracy bench."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from c4.proto.health import HealthRecord
from c4.report import FaultReport
from diagnosis.health.causes import TIMING_KINDS, JoinConfig, attach_causes, health_reports
from diagnosis.health.findings import Finding
from diagnosis.health.peers import PeerConfig, PeerModel, health_vectors
from diagnosis.health.rules import HealthRules, RuleConfig


@dataclass(frozen=True)
class HealthConfig:
    rules: RuleConfig = field(default_factory=RuleConfig)
    peers: PeerConfig = field(default_factory=PeerConfig)
    join: JoinConfig = field(default_factory=JoinConfig)
    #: file a ``health`` report for each hard finding (else only attach causes)
    health_reports: bool = True


def findings_for(records: list[HealthRecord], reports: Iterable[FaultReport],
                 config: HealthConfig | None = None) -> list[Finding]:
    """Rule findings over the whole run, and peer-model findings over each timing fault's
    window (the model is refit per window: "unlike its peers" is judged at the time)."""
    cfg = config or HealthConfig()
    found = HealthRules(cfg.rules).add_all(records).findings()
    model = PeerModel(cfg.peers)
    windows = sorted({(r.first_seen_ns - cfg.join.lookback_ns,
                       max(r.last_seen_ns, r.first_seen_ns) + cfg.join.lookahead_ns)
                      for r in reports if r.kind in TIMING_KINDS})
    for lo, hi in windows:
        vectors = health_vectors(records, lo, hi)
        if vectors:
            found.extend(model.findings(vectors, lo, hi))
    return found


def explain(reports: list[FaultReport], records: list[HealthRecord], *,
            rank_places: Mapping[int, tuple[str, ...]] | None = None, job: str = "",
            config: HealthConfig | None = None) -> list[FaultReport]:
    """``reports`` with causes attached, followed by the health reports of hard findings."""
    cfg = config or HealthConfig()
    if not records:
        return reports
    found = findings_for(records, reports, cfg)
    out = attach_causes(reports, found, rank_places=rank_places, config=cfg.join)
    if cfg.health_reports:
        out.extend(health_reports(found, job=job))
    return out
