"""The recovery controller: follows the daemon's live fault stream, decides by policy, and
drives each recovery through the state machine (``states``), recording every decision and
transition in the journal. Restarted, it picks up unfinished recoveries where they stand."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from c4.report import FaultReport
from diagnosis.client import DaemonClient, DaemonError
from recovery.config import ControllerConfig
from recovery.errors import IsolationError
from recovery.isolation.api import Isolator
from recovery.journal import Event, Journal, Recovery
from recovery.policy import DRY_RUN, ISOLATE, SKIP, Decision, Placement, Policy, decide
from recovery.states import State

log = logging.getLogger(__name__)

#: ``confirm(node, report, placement) -> (confirmed, note)``: an active probe of the node.
Confirm = Callable[[str, FaultReport, Placement], tuple[bool, str]]


def placement_from_daemon(client: DaemonClient, job: str) -> Placement:
    """Where the latest attempt of ``job`` runs, as the daemon knows it."""
    ranks = client.ranks(job)
    devices = {}
    for r in ranks:
        for dev in (r.gpu, r.nic):
            if dev:
                devices[dev] = r.host
    return Placement(frozenset(r.host for r in ranks), {r.rank: r.host for r in ranks}, devices)


class Controller:
    def __init__(self, journal: Journal, isolator: Isolator, policy: Policy, *,
                 placement: Callable[[str], Placement],
                 fault_state: Callable[[str], str] | None = None,
                 config: ControllerConfig | None = None,
                 clock: Callable[[], int] = time.time_ns,
                 confirm: Confirm | None = None,
                 vouched: Callable[[], bool] | None = None) -> None:
        """``placement(job)`` says where a job runs; ``fault_state(fault_id)`` whether a fault
        is still open (both ask the daemon in ``for_daemon``); ``confirm(node, report,
        placement) -> (confirmed, note)`` probes a suspect node when the policy requires
        confirmation (e.g. ``diagnosis.probes.confirm.ProbeConfirmer``); ``vouched()``
        whether the records behind the reports came over authenticated ingest (None: they do
        not come from a daemon)."""
        self.journal = journal
        self.isolator = isolator
        self.policy = policy
        self.cfg = config or ControllerConfig()
        self._placement = placement
        self._fault_state = fault_state
        self._clock = clock
        self._said: dict[str, tuple[str, str | None, str]] = {}
        self._confirm = confirm
        self._vouched = vouched
        self._probed: dict[tuple[str, str], tuple[bool, str]] = {}
        # hangs still within the policy's grace, decided again when it has passed (a hang's
        # report may get no new revision by then)
        self._waiting: dict[str, FaultReport] = {}

    @classmethod
    def for_daemon(cls, client: DaemonClient, journal: Journal, isolator: Isolator,
                   policy: Policy, **kwargs: Any) -> Controller:
        ctl = cls(journal, isolator, policy, placement=lambda job: placement_from_daemon(
            client, job), fault_state=lambda fid: client.fault(fid).state,
            vouched=lambda: client.status().ingest_authenticated, **kwargs)
        return ctl

    # ----- decisions ---------------------------------------------------------------------------
    def handle(self, report: FaultReport) -> Decision:
        """Decide on one report (a new one or a revision) and act on the decision."""
        now = self._clock()
        if not report.job:
            decision = Decision(SKIP, "the report names no job", rule="no_job")
        else:
            history = self.journal.history(report.job, report.id, now)
            if history.fault_handled:
                return Decision(SKIP, f"fault {report.id} already has a recovery",
                                rule="handled")
            try:
                placement = self._placement(report.job)
                blocked = set(self.isolator.isolated())
                vouched = self._vouched is None or self.policy.trust_unauthenticated_ingest \
                    or self._vouched()
            except (DaemonError, IsolationError) as exc:
                decision = Decision(SKIP, f"cannot decide now: {exc}", rule="unavailable")
            else:
                decision = decide(self.policy, report, placement, history, now, blocked) \
                    if vouched else Decision(
                        SKIP, "the daemon takes records from anyone who can reach it (no "
                              "ingest tokens or client certificates): a forged record could "
                              "name a healthy node. Give the daemon --tokens or "
                              "--tls-client-ca, or run c4 recover with "
                              "--trust-unauthenticated-ingest", rule="unvouched")
                if self.policy.require_confirmation and decision.action in (ISOLATE, DRY_RUN):
                    decision = self._confirmed(decision, report, placement)
        if decision.rule == "grace":
            self._waiting[report.id] = report
        else:
            self._waiting.pop(report.id, None)
        rec = None
        if decision.action == ISOLATE:
            assert decision.node is not None
            rec = self.journal.create_recovery(
                job=report.job, fault_id=report.id, node=decision.node,
                backend=self.isolator.name, onset_ns=report.first_seen_ns, report_ns=now,
                reason=decision.reason, now_ns=now)
        # revisions of one fault repeat the same decision; record it once
        said = (decision.action, decision.node, decision.rule)
        if rec is not None or self._said.get(report.id) != said:
            self._said[report.id] = said
            self.journal.record_decision(
                job=report.job, fault_id=report.id, revision=report.revision, kind=report.kind,
                node=decision.node, action=decision.action, reason=decision.reason,
                recovery_id=rec.id if rec else None, t_ns=now)
            level = logging.WARNING if decision.action in (ISOLATE, DRY_RUN) else logging.INFO
            log.log(level, "fault %s (%s, job %s): %s: %s", report.id, report.kind, report.job,
                    decision.action, decision.reason)
        if rec is not None:
            self.advance(rec)
        return decision

    def _confirmed(self, decision: Decision, report: FaultReport,
                   placement: Placement) -> Decision:
        """The decision after probing its node: kept (with the probe's note) only when the
        probe confirms; a probe runs once per fault and node (revisions reuse it)."""
        node = decision.node
        assert node is not None
        if self._confirm is None:
            return Decision(SKIP, f"the policy requires a probe to confirm {node} before "
                                  "isolating it, and no prober is configured", node,
                            rule="unconfirmed")
        key = (report.id, node)
        if key not in self._probed:
            try:
                self._probed[key] = self._confirm(node, report, placement)
            except Exception as exc:  # a broken prober must not stop the controller
                log.warning("probe of %s for fault %s failed: %s", node, report.id, exc)
                return Decision(SKIP, f"could not probe {node}: {exc}", node,
                                rule="probe_error")
        ok, note = self._probed[key]
        if not ok:
            return Decision(SKIP, f"probe did not confirm {node}: {note}", node,
                            rule="probe_unconfirmed")
        return replace(decision, reason=f"{decision.reason}; probe confirmed {node}: {note}")

    def recheck(self) -> list[Decision]:
        """Decide again on the hangs whose grace has passed since they were last seen."""
        now = self._clock()
        due = [r for r in self._waiting.values()
               if now - r.first_seen_ns >= self.policy.hang_grace_s * 1e9]
        return [self.handle(r) for r in due]

    # ----- driving recoveries ------------------------------------------------------------------
    def advance(self, rec: Recovery) -> Recovery:
        """Move one recovery as far as it can go now; never isolates a node twice."""
        while not rec.state.terminal:
            nxt = self._step(rec)
            if nxt is None:
                break
            rec = nxt
        return rec

    def _move(self, rid: int, dst: State, note: str, t_ns: int | None = None) -> Recovery:
        return self.journal.transition(rid, dst, note, t_ns or self._clock())

    def _step(self, rec: Recovery) -> Recovery | None:
        if rec.state == State.DECIDED:
            if self._fault_state is not None:
                try:
                    state = self._fault_state(rec.fault_id)
                except DaemonError:
                    state = "open"  # cannot tell: go on, the policy already said yes
                if state != "open":
                    return self._move(rec.id, State.ROLLED_BACK,
                                        f"the fault is {state} by now; nothing isolated")
            return self._move(rec.id, State.ISOLATING, f"asking {self.isolator.name} to "
                                f"isolate {rec.node}")
        if rec.state == State.ISOLATING:
            try:
                if rec.node in self.isolator.isolated():
                    # we may have died right after isolating it: do not isolate again
                    return self._move(rec.id, State.ISOLATED,
                                        f"{self.isolator.name} already has {rec.node} isolated")
                self.isolator.isolate(rec.node, f"fault {rec.fault_id} of job {rec.job}: "
                                      f"{rec.reason}")
            except IsolationError as exc:
                return self._move(rec.id, State.FAILED, f"isolation failed: {exc}")
            return self._move(rec.id, State.ISOLATED, f"{rec.node} isolated")
        if rec.state == State.ISOLATED:
            try:
                note = self.isolator.restart(rec.job, {rec.node})
            except IsolationError as exc:
                return self._move(rec.id, State.FAILED, f"restart failed: {exc}")
            return self._move(rec.id, State.RESTARTING, note)
        return self._follow_restart(rec)

    def _follow_restart(self, rec: Recovery) -> Recovery | None:
        """RESTARTING onwards: the supervisor's job events show the stop, the relaunch and the
        first step; each transition carries the event's own time."""
        j = self.journal
        since = next(t.t_ns for t in j.transitions(rec.id) if t.dst == State.ISOLATING)
        stopped: Event | None = None
        launched: Event | None = None
        for ev in j.events(rec.job, since):
            if ev.kind == "stopped" and stopped is None:
                stopped = ev
            elif ev.kind == "launched" and stopped is not None and launched is None:
                launched = ev
            elif ev.kind == "first_step" and stopped is not None and launched is not None \
                    and ev.attempt == launched.attempt:
                if rec.state in (State.RESTARTING, State.STOPPED):
                    if rec.state == State.RESTARTING:
                        rec = self._move(rec.id, State.STOPPED, "the job stopped",
                                           stopped.t_ns)
                    rec = self._move(rec.id, State.RELAUNCHED, _launched_note(launched),
                                       launched.t_ns)
                return self._move(rec.id, State.RESUMED,
                                    f"attempt {ev.attempt} trained step {ev.step}", ev.t_ns)
        if rec.state == State.RESTARTING and stopped is not None:
            return self._move(rec.id, State.STOPPED, "the job stopped", stopped.t_ns)
        if rec.state == State.STOPPED and launched is not None:
            return self._move(rec.id, State.RELAUNCHED, _launched_note(launched),
                                launched.t_ns)
        if (self._clock() - rec.updated_ns) / 1e9 > self.cfg.restart_timeout_s:
            return self._move(rec.id, State.FAILED, f"no progress in "
                                f"{self.cfg.restart_timeout_s:.0f} s after {rec.state.value}; "
                                "is the job's supervisor (c4 launch) running?")
        return None

    def resume(self) -> list[Recovery]:
        """Advance every unfinished recovery (after a restart of the controller)."""
        return [self.advance(r) for r in self.journal.recoveries(active_only=True)]

    # ----- the live loop -----------------------------------------------------------------------
    def run(self, client: DaemonClient, stop: threading.Event) -> None:
        """Follow the live fault stream until ``stop`` is set."""
        reports: queue.Queue[FaultReport] = queue.Queue()
        watcher = threading.Thread(target=self._watch, args=(client, reports, stop),
                                   name="c4-recover-watch", daemon=True)
        watcher.start()
        self.resume()
        while not stop.is_set():
            try:
                report = reports.get(timeout=self.cfg.poll_s)
            except queue.Empty:
                report = None
            if report is not None:
                self.handle(report)
            self.recheck()
            for rec in self.journal.recoveries(active_only=True):
                self.advance(rec)

    def _watch(self, client: DaemonClient, out: queue.Queue[FaultReport],
               stop: threading.Event) -> None:
        backoff = 0.2
        while not stop.is_set():
            try:
                # include_open: reports filed while we were away are seen on reconnect
                for report in client.watch(include_open=True):
                    backoff = 0.2
                    out.put(report)
                    if stop.is_set():
                        return
            except DaemonError as exc:
                log.warning("fault stream lost (%s); reconnecting in %.1f s", exc, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, self.cfg.reconnect_max_s)


def _launched_note(ev: object) -> str:
    data = getattr(ev, "data", {})
    return (f"attempt {getattr(ev, 'attempt', '?')} on {', '.join(data.get('hosts', []))} "
            f"(world size {data.get('world_size', '?')})")
