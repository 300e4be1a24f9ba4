"""Which fault reports lead to an isolation, and the limits that keep recovery from evicting
half a cluster on a bad day (over-eviction is the known failure of such systems)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from c4.report import KINDS, FaultReport

#: Suspect types that live on one node; links and switches are the traffic planner's business.
NODE_SUSPECTS = ("host", "gpu", "nic", "rank")
HANG_KINDS = ("noncomm_hang", "comm_hang")


def rests_on_silence(report: FaultReport) -> bool:
    """The report stands only on ranks (or transfers) not heard from: a hang, or an ``error``
    that says a rank stopped reporting. A frozen process files both within seconds; until it
    has been silent for the grace it may be a rank writing a checkpoint alone."""
    return report.kind in HANG_KINDS or (report.kind == "error"
                                         and bool(report.evidence.get("stopped_reporting")))

ISOLATE = "isolate"
SKIP = "skip"
DRY_RUN = "dry_run"


@dataclass(frozen=True)
class Policy:
    """What the controller acts on, and how much it may do.

    ``c4 recover`` builds it from its flags; every limit is checked for every decision.
    """

    #: Fault kinds that may lead to an isolation.
    kinds: tuple[str, ...] = ("noncomm_slow", "noncomm_hang", "comm_slow", "comm_hang", "error")
    #: The top suspect's score must reach this.
    min_score: float = 0.5
    #: Isolations per job over its lifetime (all attempts).
    max_per_job: int = 2
    #: Isolations across all jobs in any sliding hour.
    max_per_hour: int = 4
    #: At most this fraction of a job's nodes may be isolated (rounded down, at least one).
    max_node_fraction: float = 0.25
    #: After a recovery of a job starts, later reports for it wait this long (the restart
    #: itself disturbs timing; reports from the old attempt are stale).
    cooldown_s: float = 300.0
    #: A hang, or an error that only says a rank stopped reporting, is acted on only once it
    #: has lasted this long (seconds since its first_seen_ns).
    #: It is reported within seconds, but a rank that writes a checkpoint alone while its peers
    #: wait in their next call looks the same until it arrives and the report is withdrawn.
    hang_grace_s: float = 30.0
    #: Record what would be done, do nothing.
    dry_run: bool = False
    #: Before isolating, probe the suspect's node against healthy peers of the job
    #: (diagnosis.probes) and isolate only when the probe confirms it; the controller needs a
    #: ``confirm`` callable for this.
    require_confirmation: bool = False
    #: Node health findings on which a ``health`` report alone (hard evidence, no timing
    #: fault) isolates its node at once: finding kinds (``gpu_off_bus``, ``remap_failure``,
    #: ``port_down``) or ``xid:N`` for one XID. Empty (the default): a cause alone is never
    #: acted on; only timing faults are.
    isolate_on_causes: tuple[str, ...] = ()
    #: A hang whose first cause is hard evidence on the suspect's node (an XID 79 there) is
    #: acted on without waiting ``hang_grace_s``: a checkpoint does not make a GPU fall off
    #: the bus.
    cause_skips_grace: bool = False
    #: Act on the reports of a daemon whose ingest anyone who can reach it may use (no ingest
    #: tokens, no client certificates): a forged record could then get a healthy node
    #: isolated. Off by default; a single-user demo or test bed may turn it on.
    trust_unauthenticated_ingest: bool = False

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; choose from {list(KINDS)}")
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {self.min_score}")
        if not 0.0 < self.max_node_fraction <= 1.0:
            raise ValueError(f"max_node_fraction must be in (0, 1], got {self.max_node_fraction}")
        for name in ("max_per_job", "max_per_hour"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        for name in ("cooldown_s", "hang_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")

    def node_budget(self, job_nodes: int) -> int:
        """How many of a job's nodes may be isolated in total."""
        return max(1, int(job_nodes * self.max_node_fraction)) if job_nodes > 1 else 0


@dataclass(frozen=True)
class Placement:
    """Where a job runs: its nodes, and which node holds each rank, GPU and NIC."""

    nodes: frozenset[str]
    rank_node: Mapping[int, str] = field(default_factory=dict)
    device_node: Mapping[str, str] = field(default_factory=dict)

    def node_of(self, suspect_type: str, suspect_id: str, rank: int | None) -> str | None:
        if suspect_type == "host":
            return suspect_id if suspect_id in self.nodes else None
        if rank is not None and rank in self.rank_node:
            return self.rank_node[rank]
        if suspect_type == "rank":
            try:
                return self.rank_node.get(int(suspect_id))
            except ValueError:
                return None
        return self.device_node.get(suspect_id)


@dataclass(frozen=True)
class History:
    """What the journal says has been done, as the policy needs it."""

    job_isolations: int = 0               # recoveries of this job that isolated or may
    job_isolated_nodes: frozenset[str] = frozenset()
    isolations_last_hour: int = 0         # across all jobs
    last_recovery_ns: int | None = None   # latest recovery of this job
    fault_handled: bool = False           # a recovery already exists for this fault


@dataclass(frozen=True)
class Decision:
    action: str            # ISOLATE, SKIP or DRY_RUN
    reason: str
    node: str | None = None
    #: Which rule decided (stable, for dedup and filtering; the reason is for people).
    rule: str = ""


def _health_finding(report: FaultReport) -> str:
    """``xid:79`` for an XID health report, else the finding kind (``remap_failure``)."""
    finding = str(report.evidence.get("finding", ""))
    xid = report.evidence.get("xid")
    return f"xid:{xid}" if finding == "xid" and xid is not None else finding


def _hard_cause_on(report: FaultReport, node: str, placement: Placement) -> bool:
    if not report.causes:
        return False
    c = report.causes[0]
    target = str(c.get("target", ""))
    on = target if target in placement.nodes else placement.device_node.get(target)
    return bool(c.get("hard")) and on == node


def decide(policy: Policy, report: FaultReport, placement: Placement, history: History,
           now_ns: int, blocked: Iterable[str] = ()) -> Decision:
    """One decision with its reason. Pure: everything it looks at is passed in."""
    if history.fault_handled:
        return Decision(SKIP, f"fault {report.id} is already being recovered (or was)",
                        rule="handled")
    if report.state != "open":
        return Decision(SKIP, f"the fault is {report.state}, not open", rule="not_open")
    if report.kind == "health":
        finding = _health_finding(report)
        if finding not in policy.isolate_on_causes and \
                str(report.evidence.get("finding")) not in policy.isolate_on_causes:
            return Decision(SKIP, f"health finding {finding} alone is not acted on (policy "
                                  "isolate_on_causes: "
                                  f"{', '.join(policy.isolate_on_causes) or 'none'})",
                            rule="cause_alone")
    elif report.kind not in policy.kinds:
        return Decision(SKIP, f"kind {report.kind} is not acted on (policy kinds: "
                              f"{', '.join(policy.kinds)})", rule="kind")
    top = report.top
    if top is None:
        return Decision(SKIP, "the report names no suspect", rule="no_suspect")
    if top.type not in NODE_SUSPECTS:
        return Decision(SKIP, f"the top suspect is a {top.type} ({top.id}); isolating a node "
                              "would not remove it (re-plan traffic instead)", rule="not_a_node")
    if top.score < policy.min_score:
        return Decision(SKIP, f"top suspect score {top.score:.2f} is below the policy's "
                              f"{policy.min_score:.2f}", rule="score")
    if not placement.nodes:
        return Decision(SKIP, f"the daemon knows no nodes for job {report.job}", rule="no_nodes")
    node = placement.node_of(top.type, top.id, top.rank)
    if node is None:
        return Decision(SKIP, f"the suspect {top.type} {top.id} is not on any node job "
                              f"{report.job} uses ({', '.join(sorted(placement.nodes))})",
                        rule="wrong_node")
    tied = {placement.node_of(x.type, x.id, x.rank) for x in report.suspects
            if x.score >= top.score and x.type in NODE_SUSPECTS} - {None}
    if len(tied) > 1:
        return Decision(SKIP, f"suspects on {len(tied)} nodes ({', '.join(sorted(tied))}) "
                              "explain the fault equally; isolating one would be a guess",
                        rule="tied")
    if node in set(blocked) or node in history.job_isolated_nodes:
        return Decision(SKIP, f"node {node} is already isolated", node, rule="already_isolated")
    lasted = (now_ns - report.first_seen_ns) / 1e9
    if rests_on_silence(report) and lasted < policy.hang_grace_s and \
            not (policy.cause_skips_grace and _hard_cause_on(report, node, placement)):
        what = "the hang" if report.kind in HANG_KINDS else "the silence"
        return Decision(SKIP, f"{what} has lasted {max(lasted, 0.0):.0f} s; isolating waits "
                              f"{policy.hang_grace_s:.0f} s in case it ends (a rank writing a "
                              "checkpoint alone)", node, rule="grace")
    if history.last_recovery_ns is not None and \
            now_ns - history.last_recovery_ns < policy.cooldown_s * 1e9:
        left = policy.cooldown_s - (now_ns - history.last_recovery_ns) / 1e9
        return Decision(SKIP, f"job {report.job} is cooling down after its last recovery "
                              f"({left:.0f} s left)", node, rule="cooldown")
    if history.job_isolations >= policy.max_per_job:
        return Decision(SKIP, f"job {report.job} already had {history.job_isolations} "
                              f"isolation(s), the policy's cap per job", node, rule="cap_job")
    if history.isolations_last_hour >= policy.max_per_hour:
        return Decision(SKIP, f"{history.isolations_last_hour} isolations in the last hour, "
                              "the policy's cap per hour", node, rule="cap_hour")
    budget = policy.node_budget(len(placement.nodes))
    if len(history.job_isolated_nodes) + 1 > budget:
        return Decision(SKIP, f"isolating {node} would take {len(history.job_isolated_nodes) + 1}"
                              f" of the job's {len(placement.nodes)} nodes, over the policy's "
                              f"fraction {policy.max_node_fraction:.2f}", node, rule="fraction")
    why = (f"{report.kind}: {top.type} {top.id} (score {top.score:.2f}) is on node {node}; "
           f"{report.summary}")
    if report.causes:
        why += f" (cause: {report.causes[0].get('summary', '')})"
    if policy.dry_run:
        return Decision(DRY_RUN, f"dry run, would isolate: {why}", node, rule="dry_run")
    return Decision(ISOLATE, why, node, "isolate")
