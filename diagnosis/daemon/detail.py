"""Detail on demand: when the engine files or updates a report on a job that ships reduced
telemetry, pull the full records around the report's onset from the nodes involved.

The nodes are those of the report's suspects (a rank, a GPU, a host, a NIC, or a link or switch
next to a NIC; the topology ids the job's ranks registered), at most ``max_hosts`` per report;
each sends the calls of all its ranks of the job (a hang's story is in its peers' calls too).
The window is ``[first_seen - before_s, first_seen + after_s]``. Each node answers with what its
detail ring still holds (``DetailBatch``: complete, partial, or gone), which the daemon stores
beside the report (``Store.details``); ``c4 export --full`` merges them into the trace.
Bounded: each node sends at most ``max_records`` rows per request, a report asks each host
once (an update that names new hosts asks those), and a job gets detail for at most
``max_faults`` reports.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from c4.proto import c4_pb2
from c4.report import FaultReport
from c4.settings import at_least, non_negative, setting, validate
from diagnosis.daemon.control import ControlHub
from diagnosis.daemon.faults import FaultHub, ReportFollower
from diagnosis.errors import ConfigError
from diagnosis.store import RankRecord

log = logging.getLogger(__name__)

NS = 1_000_000_000


@dataclass(frozen=True)
class DetailConfig:
    """How much detail the daemon pulls (``c4 daemon --detail-*``)."""

    enabled: bool = setting(True, flag="--detail/--no-detail", env="C4_DETAIL",
                            help="Pull the full records around each report from the nodes "
                                 "involved, for jobs whose calls are sampled.")
    before_s: float = setting(10.0, check=non_negative)
    after_s: float = setting(5.0, check=non_negative)
    max_hosts: int = setting(8, check=at_least(1))
    max_records: int = setting(200_000, flag="--detail-records", env="C4_DETAIL_RECORDS",
                               check=at_least(1),
                               help="Most full records per node and report.")
    max_faults: int = setting(32, check=at_least(1))     # per job

    def __post_init__(self) -> None:
        validate(self, ConfigError)


def hosts_of_report(report: FaultReport, ranks: list[RankRecord], limit: int
                    ) -> tuple[list[str], list[int]]:
    """The hosts a report involves, most suspect first, and the ranks on them it names."""
    by_rank = {r.rank: r for r in ranks}
    hosts: list[str] = []
    named: set[int] = set()

    def add(recs: list[RankRecord]) -> None:
        for r in recs:
            named.add(r.rank)
            if r.host not in hosts:
                hosts.append(r.host)

    for s in report.suspects:
        if len(hosts) >= limit:
            break
        if s.rank is not None and s.rank in by_rank:
            add([by_rank[s.rank]])
        elif s.type == "rank" and s.id.isdigit() and int(s.id) in by_rank:
            add([by_rank[int(s.id)]])
        elif s.type == "host":
            add([r for r in ranks if r.host == s.id])
        elif s.type == "gpu":
            add([r for r in ranks if r.gpu == s.id])
        elif s.type == "nic":
            add([r for r in ranks if r.nic == s.id])
        elif s.type in ("link", "switch"):
            ends = set(s.id.split("~"))
            add([r for r in ranks if r.nic in ends or r.host in ends or r.gpu in ends])
    hosts = hosts[:limit]
    ranks_named = sorted(r for r in named if by_rank[r].host in hosts)
    return hosts, ranks_named


class DetailPuller(ReportFollower):
    """Watches the reports the daemon files (a thread on the fault hub) and asks nodes."""

    def __init__(self, faults: FaultHub, control: ControlHub,
                 ranks_of: Callable[[str], list[RankRecord]],
                 reduced: Callable[[str], bool], config: DetailConfig | None = None) -> None:
        self.cfg = config or DetailConfig()
        super().__init__(faults, "c4-detail", self.cfg.enabled, "ask for the detail")
        self._control = control
        self._ranks_of = ranks_of
        self._reduced = reduced
        self._asked: dict[str, set[str]] = {}           # fault id -> hosts asked
        # fault id -> the suspects it last had when every host they name was asked: a
        # report is revised every pass while it lasts, and finding its hosts reads the whole
        # job's ranks (16,384 rows at 16k GPUs)
        self._settled: dict[str, tuple] = {}
        self._per_job: dict[str, int] = {}
        self._ids = itertools.count(int(time.time() * 1000) << 16)
        self.requests = 0

    def consider(self, report: FaultReport, now_ns: int | None = None) -> set[str]:
        """Ask the nodes a report involves for their records around its onset (those not
        asked yet); returns the hosts asked."""
        cfg = self.cfg
        if report.state != "open" or not self._reduced(report.job):
            return set()
        suspects = tuple((s.type, s.id, s.rank) for s in report.suspects)
        if self._settled.get(report.id) == suspects:
            return set()
        asked = self._asked.get(report.id)
        if asked is None:
            if self._per_job.get(report.job, 0) >= cfg.max_faults:
                return set()
            asked = self._asked[report.id] = set()
            self._per_job[report.job] = self._per_job.get(report.job, 0) + 1
        ranks = self._ranks_of(report.job)
        if not ranks:
            return set()
        hosts, _named = hosts_of_report(report, ranks, cfg.max_hosts)
        fresh = [h for h in hosts if h not in asked][: cfg.max_hosts - len(asked)]
        if not fresh:
            self._settled[report.id] = suspects
            return set()
        now_ns = now_ns or time.time_ns()
        onset = int(report.first_seen_ns)
        req = c4_pb2.DetailRequest(
            job=report.job, attempt=ranks[0].attempt, fault_id=report.id,
            request=next(self._ids), from_ns=onset - int(cfg.before_s * NS),
            to_ns=min(onset + int(cfg.after_s * NS), now_ns), max_records=cfg.max_records)
        sent = self._control.request_detail(req, fresh)
        asked.update(sent)
        if asked.issuperset(fresh):
            self._settled[report.id] = suspects
        self.requests += 1 if sent else 0
        if sent:
            log.info("fault %s: asked %s for their records of %.1f s around its onset",
                     report.id, ", ".join(sorted(sent)), cfg.before_s + cfg.after_s)
        return sent
