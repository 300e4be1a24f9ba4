"""Which fault reports lead to an isolation, and the limits that keep recovery from evicting
half a cluster on a bad day (over-eviction is the known failure of such systems)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from c4.report import KINDS, FaultReport
from c4.settings import Check, non_negative, setting, validate
from recovery.errors import ConfigError

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


def _fraction(low_open: bool) -> Check:
    def check(v: float) -> str | None:
        ok = (v > 0.0 if low_open else v >= 0.0) and v <= 1.0
        return None if ok else f"must be in {'(' if low_open else '['}0, 1]"
    return check


def _known_kinds(kinds: tuple[str, ...]) -> str | None:
    unknown = sorted(set(kinds) - set(KINDS))
    return f"names unknown fault kinds {unknown}; choose from {list(KINDS)}" if unknown else None


def _names(text: str) -> tuple[str, ...]:
    """``a,b, c`` -> ("a", "b", "c"), in the order given (blank entries dropped)."""
    return tuple(n.strip() for n in str(text).split(",") if n.strip())


@dataclass(frozen=True)
class Policy:
    """What the controller acts on, and how much it may do.

    Each field carries its ``c4 recover`` flag, environment variable and range
    (``c4.settings``); the command's options are derived from them. Every limit is checked for
    every decision.
    """

    kinds: tuple[str, ...] = setting(
        ("noncomm_slow", "noncomm_hang", "comm_slow", "comm_hang", "error"), flag="--kinds",
        env="C4_RECOVER_KINDS", cli_type=str, parse=_names, to_cli=",".join, check=_known_kinds,
        help="Fault kinds that may lead to an isolation, comma-separated.")
    min_score: float = setting(0.5, flag="--min-score", env="C4_RECOVER_MIN_SCORE",
                               check=_fraction(low_open=False),
                               help="The top suspect's score needed.")
    max_per_job: int = setting(2, flag="--max-per-job", env="C4_RECOVER_MAX_PER_JOB",
                               check=non_negative,
                               help="Isolations per job over its lifetime (all attempts).")
    max_per_hour: int = setting(4, flag="--max-per-hour", env="C4_RECOVER_MAX_PER_HOUR",
                                check=non_negative,
                                help="Isolations across all jobs in any sliding hour.")
    max_node_fraction: float = setting(
        0.25, flag="--max-node-fraction", env="C4_RECOVER_MAX_NODE_FRACTION",
        check=_fraction(low_open=True),
        help="Most of a job's nodes that may be isolated (rounded down, at least one).")
    #: the restart itself disturbs timing, and reports from the old attempt are stale
    cooldown_s: float = setting(300.0, flag="--cooldown", env="C4_RECOVER_COOLDOWN",
                                check=non_negative,
                                help="Seconds a job's later reports wait after a recovery of it "
                                     "starts.")
    #: A hang, or an error that only says a rank stopped reporting, is reported within
    #: seconds, but a rank that writes a checkpoint alone while its peers wait in their next
    #: call looks the same until it arrives and the report is withdrawn.
    hang_grace_s: float = setting(30.0, flag="--hang-grace", env="C4_RECOVER_HANG_GRACE",
                                  check=non_negative,
                                  help="Seconds a hang must last before its node is isolated "
                                       "(a lone checkpoint write ends sooner).")
    dry_run: bool = setting(False, flag="--dry-run", env="C4_RECOVER_DRY_RUN",
                            help="Decide and record, do nothing.")
    #: the probe is diagnosis.probes'; the controller needs a ``confirm`` callable for this
    require_confirmation: bool = setting(
        False, flag="--require-confirmation", env="C4_RECOVER_REQUIRE_CONFIRMATION",
        help="Isolate only after an active probe (gloo, pairwise with the job's other nodes) "
             "confirms the suspect; the verdict goes into the decision's reason.")
    #: Empty (the default): a cause alone is never acted on; only timing faults are.
    isolate_on_causes: tuple[str, ...] = setting(
        (), flag="--isolate-on-cause", env="C4_RECOVER_ISOLATE_ON_CAUSE", cli_type=str,
        parse=_names, to_cli=",".join,
        help="Node health findings whose health report alone isolates the node, comma-"
             "separated: finding kinds (gpu_off_bus, remap_failure, port_down, ...) or xid:N "
             "(xid:79). Default none: causes are never acted on alone.")
    #: a checkpoint does not make a GPU fall off the bus
    cause_skips_grace: bool = setting(
        False, flag="--cause-skips-grace", env="C4_RECOVER_CAUSE_SKIPS_GRACE",
        help="Act on a hang at once when its first cause is hard evidence on the suspect's "
             "node (an XID there), without waiting --hang-grace.")
    #: a forged record could get a healthy node isolated
    trust_unauthenticated_ingest: bool = setting(
        False, flag="--trust-unauthenticated-ingest",
        env="C4_RECOVER_TRUST_UNAUTHENTICATED_INGEST",
        help="Act also on a daemon whose ingest needs no token or client certificate (anyone "
             "who can reach it could forge a fault). For a single-user test bed.")

    def __post_init__(self) -> None:
        validate(self, ConfigError)

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
    tied = {node for x in report.suspects if x.score >= top.score and x.type in NODE_SUSPECTS
            for node in [placement.node_of(x.type, x.id, x.rank)] if node is not None}
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
