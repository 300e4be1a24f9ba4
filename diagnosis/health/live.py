"""The daemon's side of node health: per job, the health records of the last ``keep_ns`` and
the rules fed as they arrive; hard findings filed as ``health`` reports (one per finding kind
and component, updated while the episode lasts); causes attached to each timing report as it
is filed, and again when a later finding changes them (a sample of pressure that crosses its
rule after the report was filed: the detectors need not revise it for its causes to follow).
The peer model is refit over the recent window at most every ``refit_s`` per job, not on every
report revision."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from c4.proto.health import HealthRecord
from c4.report import FaultReport
from diagnosis.health.causes import TIMING_KINDS, causes_for, health_reports
from diagnosis.health.diagnose import HealthConfig
from diagnosis.health.findings import Finding
from diagnosis.health.peers import PeerModel, health_vectors
from diagnosis.health.rules import HealthRules

S = 1_000_000_000


@dataclass
class _Job:
    rules: HealthRules
    records: deque[HealthRecord] = field(default_factory=deque)
    filed: dict[tuple[str, str, int], int] = field(default_factory=dict)  # key -> last_ns
    peers: list[Finding] = field(default_factory=list)
    peers_at: float = -1e18
    #: bumped when a finding opens: the open timing reports' causes may have changed
    version: int = 0
    keys: set[tuple[str, str, int]] = field(default_factory=set)
    #: open timing reports as the detectors filed them -> (health version, causes' kinds)
    explained: dict[str, tuple[FaultReport, int, frozenset[tuple[str, str]]]] = \
        field(default_factory=dict)


class LiveHealth:
    def __init__(self, config: HealthConfig | None = None, *, keep_ns: int = 1800 * S,
                 max_records: int = 500_000, refit_s: float = 30.0) -> None:
        self.config = config or HealthConfig()
        self.keep_ns, self.max_records, self.refit_s = keep_ns, max_records, refit_s
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._model = PeerModel(self.config.peers)

    def _job(self, job: str) -> _Job:
        st = self._jobs.get(job)
        if st is None:
            st = self._jobs[job] = _Job(HealthRules(self.config.rules))
        return st

    def add(self, job: str, records: list[HealthRecord]) -> list[FaultReport]:
        """Take a batch; the health reports to file (new hard findings, or ones that grew)."""
        with self._lock:
            st = self._job(job)
            for r in sorted(records, key=lambda r: r.t_ns):
                st.records.append(r)
                st.rules.add(r)
            newest = max((r.t_ns for r in st.records), default=0)
            while st.records and (len(st.records) > self.max_records
                                  or st.records[0].t_ns < newest - self.keep_ns):
                st.records.popleft()
            fresh = []
            findings = st.rules.findings()
            keys = {(f.kind, f.target, f.first_ns) for f in findings}
            if keys - st.keys:
                st.version += 1
                st.keys = keys
            for f in (f for f in findings if f.hard):
                key = (f.kind, f.target, f.first_ns)
                if st.filed.get(key) != f.last_ns:
                    st.filed[key] = f.last_ns
                    fresh.append(f)
        if not self.config.health_reports:
            return []
        return [r.with_updates(id=f"health:{f.kind}:{f.target}")
                for r, f in zip(health_reports(fresh, job), fresh)]

    def explain(self, job: str, report: FaultReport,
                rank_places: Mapping[int, tuple[str, ...]] | None = None) -> FaultReport:
        """``report`` with the causes the job's recent health gives it. An open report is kept
        (its latest revision) so that ``revisit`` can give it causes found later."""
        if report.kind not in TIMING_KINDS:
            return report
        with self._lock:
            st = self._jobs.get(job)
            if st is None:
                st = self._job(job)
            causes = self._causes(st, report, rank_places)
            if report.id and report.state == "open":
                st.explained[report.id] = (report, st.version, _kinds(causes))
            else:
                st.explained.pop(report.id, None)
        return report.with_updates(causes=tuple(causes)) if causes else report

    def revisit(self, job: str, rank_places: Mapping[int, tuple[str, ...]] | None = None
                ) -> list[FaultReport]:
        """The job's open timing reports whose causes changed since they were last explained
        (a finding opened since), with their new causes: to file again."""
        out = []
        with self._lock:
            st = self._jobs.get(job)
            if st is None:
                return []
            for key, (report, version, kinds) in list(st.explained.items()):
                if version == st.version:
                    continue
                causes = self._causes(st, report, rank_places)
                st.explained[key] = (report, st.version, _kinds(causes))
                if _kinds(causes) != kinds:
                    out.append(report.with_updates(causes=tuple(causes)))
        return out

    def _causes(self, st: _Job, report: FaultReport,
                rank_places: Mapping[int, tuple[str, ...]] | None) -> list[dict]:
        findings = st.rules.findings()
        now = time.monotonic()
        if now - st.peers_at >= self.refit_s and st.records:
            hi = st.records[-1].t_ns
            lo = hi - self.config.join.lookback_ns
            st.peers = self._model.findings(health_vectors(st.records, lo, hi), lo, hi)
            st.peers_at = now
        return causes_for(report, findings + st.peers, rank_places=rank_places,
                          config=self.config.join)

    def forget(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)


def _kinds(causes: list[dict]) -> frozenset[tuple[str, str]]:
    return frozenset((c["kind"], c["target"]) for c in causes)
