"""The controller against a real daemon (served over gRPC in this process, reports filed into
its hub as the detectors would), a real blocklist file and a real SQLite journal: bad reports
are refused with a reason, a controller killed in the middle of a recovery resumes without
isolating twice, and one that finds its fault closed rolls back. The supervisor's job events
are written as ``c4 launch`` writes them (the end-to-end test runs the real supervisor)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace

import pytest

from c4.report import FaultReport, Suspect
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from recovery.config import ControllerConfig
from recovery.controller import Controller
from recovery.isolation.blocklist import BlocklistIsolator
from recovery.journal import Journal
from recovery.policy import DRY_RUN, SKIP, Policy
from recovery.states import State
from recovery.timeline import job_efficiency, timeline
from tests.support.frames import rank_info
from tests.support.services import free_port, wait_for

pytestmark = [pytest.mark.network]

JOB = "train-a"
# the test daemon checks no tokens: a controller acts on its reports only when told to
TRUSTING = Policy(trust_unauthenticated_ingest=True)


class Crash(BaseException):
    """The controller process dying at this point."""


class Counting(BlocklistIsolator):
    def __init__(self, path, crash_after_isolate: bool = False) -> None:
        super().__init__(path)
        self.calls = 0
        self.crash_after_isolate = crash_after_isolate

    def isolate(self, node: str, reason: str) -> None:
        self.calls += 1
        super().isolate(node, reason)
        if self.crash_after_isolate:
            raise Crash()


@pytest.fixture
def daemon():
    port = free_port()
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{port}", store="memory://"))
    d.start()
    client = DaemonClient(f"127.0.0.1:{port}")
    for r in range(4):
        req = rank_info(JOB, r, 4, f"node{r}", pid=1000 + r)
        req.sidecar, req.seq = "test", r + 1
        client.send(req)
    wait_for(lambda: len(client.ranks(JOB)) == 4, 10, what="the job's ranks")
    yield d, client
    client.close()
    d.stop(grace=1)


def _report(host: str, *, kind: str = "noncomm_slow", type_: str = "host",
            state: str = "open") -> FaultReport:
    return FaultReport(kind=kind, suspects=(Suspect(type_, host, 0.95),),
                       first_seen_ns=1_800_000_000_000_000_000, summary=f"{host} is slow",
                       id=f"slow:{host}", state=state)


def test_live_stream_bad_reports_and_dry_run(daemon, tmp_path):
    d, client = daemon
    journal = Journal(tmp_path / "journal.db")
    blocklist = BlocklistIsolator(tmp_path / "blocklist.json")
    ctl = Controller.for_daemon(client, journal, blocklist,
                                replace(TRUSTING, dry_run=True))
    stop = threading.Event()
    runner = threading.Thread(target=ctl.run, args=(client, stop), daemon=True)
    runner.start()
    try:
        d.hub.file(JOB, _report("node9"))                       # not a node of the job
        d.hub.file(JOB, _report("node1:leaf0", kind="comm_slow", type_="link"))
        d.hub.file("other-job", _report("node1"))               # a job with no ranks known
        d.hub.file(JOB, _report("node2"))                       # acted on, but a dry run
        d.hub.file(JOB, _report("node2").with_updates(summary="still slow"))   # a revision
        wait_for(lambda: len(journal.decisions()) >= 4, 15, what="four decisions")
    finally:
        stop.set()
        runner.join(5)
    got = {row.fault_id: row for row in journal.decisions()}
    assert len(journal.decisions()) == 4, "a revision repeating a decision is recorded once"
    wrong = got[d.hub.report_id(JOB, "slow:node9")]
    assert wrong.action == SKIP and "not on any node" in wrong.reason
    link = got[d.hub.report_id(JOB, "slow:node1:leaf0")]
    assert link.action == SKIP and "link" in link.reason
    other = got[d.hub.report_id("other-job", "slow:node1")]
    assert other.action == SKIP and "knows no nodes" in other.reason
    dry = got[d.hub.report_id(JOB, "slow:node2")]
    assert dry.action == DRY_RUN and dry.node == "node2"
    assert journal.recoveries() == [] and blocklist.isolated() == {}
    # and the CLI shows the decisions with their reasons
    out = subprocess.run([sys.executable, "-m", "c4", "recoveries", "--format", "json",
                          "--journal", str(journal.path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {r["action"] for r in doc["decisions"]} == {SKIP, DRY_RUN}
    assert any("not on any node" in r["reason"] for r in doc["decisions"])


def test_a_daemon_anyone_may_feed_is_not_acted_on_unless_trusted(daemon, tmp_path):
    d, client = daemon
    assert not client.status().ingest_authenticated
    blocklist = BlocklistIsolator(tmp_path / "blocklist.json")
    report = d.hub.file(JOB, _report("node2"))
    decision = Controller.for_daemon(client, Journal(tmp_path / "a.db"), blocklist,
                                     Policy()).handle(report)
    assert decision.action == SKIP and decision.rule == "unvouched"
    assert "--tokens" in decision.reason and blocklist.isolated() == {}
    trusting = Policy(dry_run=True, trust_unauthenticated_ingest=True)
    decision = Controller.for_daemon(client, Journal(tmp_path / "b.db"), blocklist,
                                     trusting).handle(report)
    assert decision.action == DRY_RUN and decision.node == "node2"


def test_restarted_controller_resumes_and_never_isolates_twice(daemon, tmp_path):
    d, client = daemon
    journal = Journal(tmp_path / "journal.db")
    policy = Policy(cooldown_s=0, trust_unauthenticated_ingest=True)
    report = d.hub.file(JOB, _report("node2"))
    # the first controller dies right after the backend isolated the node
    first = Counting(tmp_path / "blocklist.json", crash_after_isolate=True)
    with pytest.raises(Crash):
        Controller.for_daemon(client, journal, first, policy).handle(report)
    (rec,) = journal.recoveries()
    assert rec.state == State.ISOLATING and first.calls == 1
    # a new controller (new journal connection, new isolator) picks it up
    journal = Journal(tmp_path / "journal.db")
    second = Counting(tmp_path / "blocklist.json")
    ctl = Controller.for_daemon(client, journal, second, policy)
    (rec,) = ctl.resume()
    assert second.calls == 0, "the node was isolated already; the backend must not be asked again"
    assert rec.state == State.RESTARTING
    assert list(second.isolated()) == ["node2"]
    # the report arrives again (a revision, or the stream replaying open faults): no new action
    assert ctl.handle(d.hub.file(JOB, _report("node2"))).action == SKIP
    assert len(journal.recoveries()) == 1 and second.calls == 0
    # the supervisor stops the job and relaunches it without node2; training resumes
    journal.add_event(JOB, "checkpoint", attempt=0, step=20,
                      data={"saved_ns": rec.created_ns - 2 * 10**9, "path": "ckpt"},
                      t_ns=rec.created_ns - 10**9)
    journal.add_event(JOB, "stopping", attempt=0, step=24)
    journal.add_event(JOB, "stopped", attempt=0, step=24)
    (rec,) = ctl.resume()
    assert rec.state == State.STOPPED
    journal.add_event(JOB, "launched", attempt=1, data={"hosts": ["node0", "node1", "node3"],
                                                        "world_size": 3})
    journal.add_event(JOB, "first_step", attempt=1, step=20)
    (rec,) = ctl.resume()
    assert rec.state == State.RESUMED and journal.recoveries(active_only=True) == []
    states = [t.dst for t in journal.transitions(rec.id)]
    assert states == [State.DECIDED, State.ISOLATING, State.ISOLATED, State.RESTARTING,
                      State.STOPPED, State.RELAUNCHED, State.RESUMED]
    tl = timeline(journal, rec)
    assert tl.resumed_step == 20 and tl.last_step == 24 and tl.lost_steps == 5
    assert tl.lost_work_s is not None and tl.lost_work_s > 2.0
    assert list(tl.at) == ["onset", "report", "isolated", "stopping", "stopped", "relaunched",
                           "first_step"]
    assert job_efficiency(journal, JOB) is not None


def test_fault_closed_before_isolation_rolls_back(daemon, tmp_path):
    d, client = daemon
    journal = Journal(tmp_path / "journal.db")
    report = d.hub.file(JOB, _report("node1"))
    rec = journal.create_recovery(job=JOB, fault_id=report.id, node="node1",
                                  backend="blocklist", onset_ns=report.first_seen_ns,
                                  report_ns=report.first_seen_ns, reason="test")
    assert rec is not None and rec.state == State.DECIDED   # the controller died here
    d.hub.file(JOB, _report("node1", state="closed"))
    blocklist = Counting(tmp_path / "blocklist.json")
    (rec,) = Controller.for_daemon(client, journal, blocklist, TRUSTING).resume()
    assert rec.state == State.ROLLED_BACK and "closed" in rec.note
    assert blocklist.calls == 0 and blocklist.isolated() == {}


def test_restart_that_never_comes_fails_with_a_reason(daemon, tmp_path):
    d, client = daemon
    journal = Journal(tmp_path / "journal.db")
    clock = [1_900_000_000_000_000_000]
    ctl = Controller.for_daemon(client, journal, BlocklistIsolator(tmp_path / "b.json"),
                                TRUSTING, config=ControllerConfig(restart_timeout_s=30),
                                clock=lambda: clock[0])
    ctl.handle(d.hub.file(JOB, _report("node3")))
    (rec,) = journal.recoveries()
    assert rec.state == State.RESTARTING
    clock[0] = rec.updated_ns + 31 * 10**9
    (rec,) = ctl.resume()
    assert rec.state == State.FAILED and "c4 launch" in rec.note


def test_a_hang_waits_out_its_grace_even_without_new_revisions(daemon, tmp_path):
    """A hang within the policy's grace is held; once the grace has passed it is decided again
    (a hang's report may get no new revision by then), and one withdrawn meanwhile (the rank
    arrived: it was writing a checkpoint) isolates nothing."""
    d, client = daemon
    journal = Journal(tmp_path / "journal.db")
    blocklist = Counting(tmp_path / "blocklist.json")
    t0 = 1_900_000_000_000_000_000
    clock = [t0]
    ctl = Controller.for_daemon(client, journal, blocklist, replace(TRUSTING, hang_grace_s=30),
                                clock=lambda: clock[0])

    def hang(host: str, state: str = "open") -> FaultReport:
        return FaultReport(kind="noncomm_hang", suspects=(Suspect("host", host, 0.95),),
                           first_seen_ns=t0, summary=f"{host} never arrived",
                           id=f"hang:{host}", state=state)

    assert ctl.handle(d.hub.file(JOB, hang("node1"))).rule == "grace"
    assert ctl.handle(d.hub.file(JOB, hang("node2"))).rule == "grace"
    clock[0] = t0 + 10 * 10**9
    assert ctl.recheck() == []                                   # not due yet
    ctl.handle(d.hub.file(JOB, hang("node2", state="resolved")))  # node2's rank arrived
    clock[0] = t0 + 31 * 10**9
    (decision,) = ctl.recheck()
    assert decision.node == "node1" and decision.rule == "isolate", decision.reason
    assert list(blocklist.isolated()) == ["node1"] and blocklist.calls == 1
    assert ctl.recheck() == []                                   # decided once
