"""Acting on node health: never on a cause alone unless configured; a hard cause on the node
may skip the hang grace."""

from __future__ import annotations

from c4.proto.health import HealthRecord
from c4.report import FaultReport, Suspect
from diagnosis.health.causes import health_reports
from diagnosis.health.rules import HealthRules
from recovery.policy import ISOLATE, SKIP, History, Placement, Policy, decide

NOW = 1_800_000_000_000_000_000
NODES = Placement(frozenset({"node0", "node1", "node2", "node3"}),
                  {0: "node0", 1: "node1", 2: "node2", 3: "node3"},
                  {"node2/gpu0": "node2"})


def _health(code: int = 79) -> FaultReport:
    rules = HealthRules().add_all([HealthRecord("node2", NOW - 10**9, "node2/gpu0", event="xid",
                                                code=code, text="fell off the bus")])
    [rep] = health_reports(rules.findings(), job="j")
    return rep.with_updates(id="h1")


def test_a_cause_alone_is_not_acted_on_by_default() -> None:
    d = decide(Policy(), _health(), NODES, History(), NOW)
    assert (d.action, d.rule) == (SKIP, "cause_alone") and "xid:79" in d.reason


def test_configured_cause_isolates_at_once() -> None:
    d = decide(Policy(isolate_on_causes=("xid:79",)), _health(), NODES, History(), NOW)
    assert (d.action, d.node) == (ISOLATE, "node2") and "XID 79" in d.reason
    # another XID is not what the policy named
    d = decide(Policy(isolate_on_causes=("xid:79",)), _health(119), NODES, History(), NOW)
    assert d.rule == "cause_alone"
    # a finding kind covers every XID of it
    assert decide(Policy(isolate_on_causes=("xid",)), _health(119), NODES, History(),
                  NOW).action == ISOLATE


def test_hard_cause_on_the_node_skips_the_hang_grace() -> None:
    cause = {"kind": "xid", "target": "node2/gpu0", "summary": "XID 79", "hard": True}
    hang = FaultReport("noncomm_hang", (Suspect("rank", "2", 0.95, rank=2),), NOW - 5 * 10**9,
                       "stuck", id="f1", job="j", causes=(cause,))
    assert decide(Policy(), hang, NODES, History(), NOW).rule == "grace"
    d = decide(Policy(cause_skips_grace=True), hang, NODES, History(), NOW)
    assert d.action == ISOLATE and "cause: XID 79" in d.reason
    # a soft cause, or one on another node, does not
    soft = hang.with_updates(causes=({**cause, "hard": False},))
    assert decide(Policy(cause_skips_grace=True), soft, NODES, History(), NOW).rule == "grace"
    far = hang.with_updates(causes=({**cause, "target": "node3"},))
    assert decide(Policy(cause_skips_grace=True), far, NODES, History(), NOW).rule == "grace"
