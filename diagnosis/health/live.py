"""The daemon's side of node health: per job, the health records of the last ``keep_ns`` and
the rules fed as they arrive; hard findings filed as ``health`` reports (one per finding kind
and component, updated while the episode lasts); causes attached to each timing report as it
is filed. The peer model is refit over the recent window at most every ``refit_s`` per job,
not on every report revision."""

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
            for f in st.rules.hard_findings():
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
        """``report`` with the causes the job's recent health gives it."""
        if report.kind not in TIMING_KINDS:
            return report
        with self._lock:
            st = self._jobs.get(job)
            if st is None:
                return report
            findings = st.rules.findings()
            now = time.monotonic()
            if now - st.peers_at >= self.refit_s and st.records:
                hi = st.records[-1].t_ns
                lo = hi - self.config.join.lookback_ns
                st.peers = self._model.findings(health_vectors(st.records, lo, hi), lo, hi)
                st.peers_at = now
            findings = findings + st.peers
        causes = causes_for(report, findings, rank_places=rank_places, config=self.config.join)
        return report.with_updates(causes=tuple(causes)) if causes else report

    def forget(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)
