"""When a report blames a rank's process (a hang, or a rank that stopped reporting), add to it
the process's PID and host, the command that shows its stack, and, for processes on the
daemon's own machine, the stack itself (py-spy) and a Flight Recorder dump request.

A thread on the fault hub, like the detail puller: the engine is never held up, and each
process of a report is inspected once (py-spy takes a second or two).
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from c4.proto import c4_pb2
from c4.report import FaultReport
from c4.settings import at_least, format_names, parse_names, positive, setting, validate
from diagnosis.daemon.faults import FaultHub, ReportFollower
from diagnosis.errors import ConfigError
from diagnosis.inspection import ProcessFacts, inspect_process
from diagnosis.store import RankRecord

log = logging.getLogger(__name__)

#: Reports that blame a process rather than a link or a switch.
PROCESS_KINDS = ("noncomm_hang", "error")
#: Reports whose inspected ranks are remembered (the oldest are forgotten first).
MAX_FAULTS_KEPT = 4096


def this_machine() -> frozenset[str]:
    name = socket.gethostname()
    return frozenset({name, name.split(".", 1)[0]})


@dataclass(frozen=True)
class InspectConfig:
    """``c4 daemon --inspect/--no-inspect --inspect-hosts``."""

    enabled: bool = setting(True, flag="--inspect/--no-inspect", env="C4_INSPECT",
                            help="Add to hang reports the blamed process's PID and host, its "
                                 "Python stack (py-spy, by the sidecar of its node) and a "
                                 "Flight Recorder dump request.")
    #: Host ids (as ranks report them) whose processes run on the daemon's machine; empty:
    #: this machine's hostname.
    local_hosts: frozenset[str] = setting(
        default_factory=frozenset, flag="--inspect-hosts", env="C4_INSPECT_HOSTS",
        cli_type=str, parse=parse_names, to_cli=format_names,
        help="Comma-separated host ids (as ranks report them) that run on this machine "
             "(default: its hostname).")
    #: At most this many processes per report (the first culprits).
    max_processes: int = setting(4, check=at_least(1))
    py_spy: str = "py-spy"
    timeout_s: float = setting(10.0, check=positive)
    proc_root: Path = Path("/proc")

    def __post_init__(self) -> None:
        validate(self, ConfigError)


def culprit_ranks(report: FaultReport) -> list[int]:
    """The ranks whose processes a report blames, most likely first."""
    if report.kind not in PROCESS_KINDS:
        return []
    ranks = [int(r) for r in report.evidence.get("culprits", []) if isinstance(r, int)]
    if not ranks:
        ranks = [s.rank for s in report.suspects if s.rank is not None]
    return list(dict.fromkeys(ranks))


class ProcessInspector(ReportFollower):
    """Watches filed reports and annotates them with their culprits' processes."""

    def __init__(self, faults: FaultHub, ranks_of: Callable[[str], list[RankRecord]],
                 config: InspectConfig | None = None,
                 ask_node: Callable[[c4_pb2.InspectRequest], bool] | None = None) -> None:
        """``ask_node``: send an inspection request to the sidecar of a rank's host (the
        control hub); without one, processes on other machines get only the command to run."""
        self.cfg = config or InspectConfig()
        self._ask_node = ask_node
        self._ids = itertools.count(int(time.time() * 1000) << 16)
        self._local = self.cfg.local_hosts or this_machine()
        super().__init__(faults, "c4-inspect", self.cfg.enabled, "inspect the processes")
        self._ranks_of = ranks_of
        self._done: dict[str, set[int]] = {}      # fault id -> ranks inspected

    def answered(self, result: c4_pb2.InspectResult) -> None:
        """A sidecar's inspection of a process on its node: it replaces the rank's entry."""
        try:
            fact = ProcessFacts.from_json(json.loads(result.facts_json))
        except (ValueError, TypeError) as exc:
            log.warning("sidecar on %s sent an unreadable inspection: %s", result.host, exc)
            return
        report = self._faults.get(result.fault_id)
        if report is None:
            return
        kept = [p for p in report.evidence.get("processes", []) if p.get("rank") != fact.rank]
        self._faults.annotate(result.fault_id, "processes",
                              sorted([*kept, fact.to_json()], key=lambda p: p.get("rank", 0)))
        log.info("fault %s: the sidecar on %s inspected rank %d", result.fault_id,
                 result.host, fact.rank)

    def consider(self, report: FaultReport) -> list[ProcessFacts]:
        """Inspect the processes of a report's culprits not inspected yet; annotate it."""
        if report.state != "open":
            return []
        ranks = culprit_ranks(report)[: self.cfg.max_processes]
        done = self._done.setdefault(report.id, set())
        while len(self._done) > MAX_FAULTS_KEPT:
            del self._done[next(iter(self._done))]
        new = [r for r in ranks if r not in done]
        if not new:
            return []
        where = {r.rank: r for r in self._ranks_of(report.job)}
        facts = []
        for rank in new:
            rec = where.get(rank)
            if rec is None:
                continue
            done.add(rank)
            local = rec.host in self._local
            fact = inspect_process(
                rank, rec.host, rec.pid, backend=rec.backend, local=local,
                py_spy=self.cfg.py_spy, timeout_s=self.cfg.timeout_s,
                proc_root=self.cfg.proc_root)
            if not local and rec.pid > 0 and self._ask_node is not None and self._ask_node(
                    c4_pb2.InspectRequest(request=next(self._ids), job=report.job,
                                          attempt=rec.attempt, fault_id=report.id, rank=rank,
                                          host=rec.host, backend=rec.backend)):
                fact = replace(fact, stack_note=f"asked the sidecar on {rec.host} for its "
                               f"stack; meanwhile run `{fact.command}` there")
            facts.append(fact)
        if facts:
            kept = [p for p in report.evidence.get("processes", [])
                    if p.get("rank") not in {f.rank for f in facts}]
            self._faults.annotate(report.id, "processes",
                                  kept + [f.to_json() for f in facts])
            log.info("fault %s: inspected the processes of rank(s) %s", report.id,
                     ", ".join(str(f.rank) for f in facts))
        return facts
