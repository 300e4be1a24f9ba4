"""The policy's decisions and the state machine's table, on hand-made reports."""

from __future__ import annotations

import pytest

from c4.report import FaultReport, Suspect
from recovery.errors import ConfigError, TransitionError
from recovery.policy import DRY_RUN, ISOLATE, SKIP, History, Placement, Policy, decide
from recovery.states import TERMINAL, TRANSITIONS, State, check_transition

NOW = 1_800_000_000_000_000_000
NODES = Placement(frozenset({"node0", "node1", "node2", "node3"}),
                  {0: "node0", 1: "node1", 2: "node2", 3: "node3"},
                  {"node2/gpu0": "node2"})


def _report(type_: str = "host", id_: str = "node2", score: float = 0.9,
            kind: str = "noncomm_slow", rank: int | None = None) -> FaultReport:
    return FaultReport(kind=kind, suspects=(Suspect(type_, id_, score, rank=rank),),
                       first_seen_ns=NOW - 10**9, summary="late", id="f1", job="j")


@pytest.mark.parametrize(("report", "node"), [
    (_report(), "node2"),
    (_report("gpu", "node2/gpu0"), "node2"),
    (_report("gpu", "x/gpu9", rank=1), "node1"),
    (_report("rank", "3"), "node3"),
])
def test_node_suspects_map_to_the_node(report, node):
    d = decide(Policy(), report, NODES, History(), NOW)
    assert (d.action, d.node) == (ISOLATE, node), d.reason


def test_suspects_tied_across_nodes_are_not_a_node_to_isolate():
    """A slow communicator of ranks 0, 1 and 2, nothing to tell them apart: isolating the first
    would be a coin toss. A NIC tied with its host's GPU is one node."""
    tied = FaultReport(kind="comm_slow", suspects=tuple(
        Suspect("rank", str(r), 1.0, rank=r) for r in range(3)), first_seen_ns=NOW - 10**9,
        summary="slow", id="f1", job="j")
    d = decide(Policy(), tied, NODES, History(), NOW)
    assert d.action == SKIP and d.rule == "tied" and "3 nodes" in d.reason, d.reason
    one = FaultReport(kind="comm_hang", suspects=(
        Suspect("gpu", "node2/gpu0", 0.9), Suspect("nic", "node2/nic0", 0.9)),
        first_seen_ns=NOW - 10**12, summary="stuck", id="f2", job="j")
    nics = Placement(NODES.nodes, NODES.rank_node, {**NODES.device_node, "node2/nic0": "node2",
                                                    "node3/nic0": "node3"})
    assert decide(Policy(), one, nics, History(), NOW).action == ISOLATE
    two = FaultReport(kind="comm_hang", suspects=(
        Suspect("nic", "node2/nic0", 1.0), Suspect("nic", "node3/nic0", 1.0)),
        first_seen_ns=NOW - 10**12, summary="stuck", id="f3", job="j")
    assert decide(Policy(), two, nics, History(), NOW).rule == "tied"


@pytest.mark.parametrize(("policy", "report", "history", "words"), [
    (Policy(), _report(id_="node9"), History(), "not on any node"),
    (Policy(), _report("link", "node2:leaf0"), History(), "re-plan traffic"),
    (Policy(), _report(score=0.3), History(), "below"),
    (Policy(kinds=("error",)), _report(), History(), "not acted on"),
    (Policy(), _report(), History(fault_handled=True), "already"),
    # a fault its job's end resolved: a recovery started later leaves it alone
    (Policy(), _report().with_updates(state="resolved"), History(), "resolved, not open"),
    (Policy(), _report(), History(job_isolated_nodes=frozenset({"node2"})), "already isolated"),
    (Policy(cooldown_s=60), _report(), History(last_recovery_ns=NOW - 10**9), "cooling down"),
    (Policy(max_per_job=1, cooldown_s=0), _report(),
     History(job_isolations=1, last_recovery_ns=NOW - 10**12), "cap per job"),
    (Policy(max_per_hour=2), _report(), History(isolations_last_hour=2), "cap per hour"),
    (Policy(cooldown_s=0, max_node_fraction=0.25), _report(),
     History(job_isolations=1, job_isolated_nodes=frozenset({"node0"})), "fraction"),
])
def test_skips_say_why(policy, report, history, words):
    d = decide(policy, report, NODES, history, NOW)
    assert d.action == SKIP and words in d.reason, d.reason


def test_dry_run_decides_but_does_not_act():
    d = decide(Policy(dry_run=True), _report(), NODES, History(), NOW)
    assert d.action == DRY_RUN and d.node == "node2" and "would isolate" in d.reason


def test_a_single_node_job_is_never_evicted():
    d = decide(Policy(max_node_fraction=1.0), _report(id_="node0"),
               Placement(frozenset({"node0"})), History(), NOW)
    assert d.action == SKIP and "fraction" in d.reason


def test_bad_policy_values_are_named():
    with pytest.raises(ConfigError, match="bogus"):
        Policy(kinds=("bogus",))
    with pytest.raises(ConfigError, match="--max-node-fraction"):
        Policy(max_node_fraction=0)


def test_transition_table():
    for state in State:
        assert state in TRANSITIONS
        assert (not TRANSITIONS[state]) == (state in TERMINAL)
    check_transition(State.ISOLATING, State.ISOLATED)
    with pytest.raises(TransitionError, match="allowed from isolated: failed, restarting"):
        check_transition(State.ISOLATED, State.ISOLATING)
    with pytest.raises(TransitionError, match="terminal"):
        check_transition(State.RESUMED, State.FAILED)


@pytest.mark.parametrize("kind", ["noncomm_hang", "comm_hang"])
def test_a_hang_is_acted_on_only_after_its_grace(kind):
    """A rank writing a checkpoint alone makes its peers wait like a hang until it arrives:
    the node is isolated only once the hang has lasted the grace."""
    young = FaultReport(kind=kind, suspects=(Suspect("host", "node2", 0.9),),
                        first_seen_ns=NOW - 5 * 10**9, summary="waits", id="h", job="j")
    d = decide(Policy(hang_grace_s=30), young, NODES, History(), NOW)
    assert d.action == SKIP and d.rule == "grace" and "lasted 5 s" in d.reason, d.reason
    d = decide(Policy(hang_grace_s=30), young, NODES, History(), NOW + 25 * 10**9)
    assert (d.action, d.node) == (ISOLATE, "node2"), d.reason
    # slowness is not a hang: no grace
    slow = decide(Policy(hang_grace_s=30), _report(), NODES, History(), NOW)
    assert slow.action == ISOLATE
    with pytest.raises(ConfigError, match="--hang-grace"):
        Policy(hang_grace_s=-1)


def test_a_rank_that_stopped_reporting_waits_out_the_hang_grace():
    """A frozen rank files a noncomm_hang and, a second later, an ``error`` saying it stopped
    reporting: the error is the same silence and is held by the same grace; an error from a
    failed call is not."""
    silent = FaultReport(kind="error", suspects=(Suspect("rank", "2", 0.9, rank=2),),
                         first_seen_ns=NOW - 3 * 10**9, summary="rank 2 stopped reporting",
                         evidence={"culprits": [2], "stopped_reporting": True},
                         id="e", job="j")
    d = decide(Policy(hang_grace_s=10), silent, NODES, History(), NOW)
    assert d.action == SKIP and d.rule == "grace" and "silence has lasted 3 s" in d.reason
    d = decide(Policy(hang_grace_s=10), silent, NODES, History(), NOW + 8 * 10**9)
    assert (d.action, d.node) == (ISOLATE, "node2"), d.reason
    failed = _report("rank", "2", kind="error")
    assert decide(Policy(hang_grace_s=10), failed, NODES, History(), NOW).action == ISOLATE
