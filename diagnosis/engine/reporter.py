"""The engine's one reporter: detectors hand it frozen findings; it owns the reports' identity
(which incident a finding belongs to), their revisions and their ends (resolved with a reason:
cleared, or withdrawn), and hands out the reports that changed.

Identity: a finding names its incident by ``key``. A finding whose blamed ranks (``culprits``)
overlap an open report of the same kind is the same incident, whichever detector found it (a
rank frozen in a call is found live while its peers wait, and again when it times out). New
evidence for an open incident revises its report: same id, next revision, onset moved back to
the earliest evidence. A slow fault that comes back re-opens its report; a new hang where an
earlier one ended is a new incident, filed under a new id (``key#2``, ...).

Report state lives in the findings' typed fields (``Finding``); ``evidence`` is what the user is
shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from c4.report import FaultReport, Suspect

#: Kinds whose incidents are told apart by the ranks they blame (see ``Reporter.file``).
BY_CULPRITS = frozenset({"noncomm_hang"})


@dataclass(frozen=True)
class Finding:
    """What a detector found, as of one pass: the report it stands for, and the state the
    detectors and the reporter reason on."""

    kind: str
    key: str                          # the incident's identity (the report id it files under)
    suspects: tuple[Suspect, ...]
    onset_ns: int                     # when the evidence begins
    summary: str
    pg: str | None = None
    seq: int | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)   # shown to the user
    culprits: tuple[int, ...] = ()    # ranks blamed (hangs, errors)
    ranks: tuple[int, ...] = ()       # ranks covered (a slow host's)
    connections: tuple[str, ...] = ()  # "src>dst" connections found slow or lossy
    recurring: bool = False           # slow again and again, normal between
    via: str = ""                     # what the evidence rests on ("connections", ...)
    timed_out: bool = False           # a hang that ended in failed calls: stays open
    stopped_reporting: bool = False   # an error that is a rank's silence

    def report(self) -> FaultReport:
        return FaultReport(self.kind, self.suspects, self.onset_ns, self.summary, pg=self.pg,
                           seq=self.seq, evidence=dict(self.evidence), id=self.key)


@dataclass(frozen=True)
class Filed:
    """An incident as the reporter keeps it: its latest finding and report, and how it ended."""

    finding: Finding
    report: FaultReport
    resolution: str = ""      # why it ended ("" while open)
    cleared: bool = False     # it happened and ended (not withdrawn)

    @property
    def open(self) -> bool:
        return self.report.state == "open"


class Reporter:
    def __init__(self) -> None:
        self._filed: dict[str, Filed] = {}
        self._changed: set[str] = set()
        self._current: dict[str, str] = {}      # key -> id of its latest incident

    # ----- filing -----------------------------------------------------------------------------
    def file(self, finding: Finding, now: int, renew: bool = False) -> str:
        """File or revise the incident of ``finding``; returns the id it is filed under.
        ``renew``: if that incident ended, file a new one (``key#2``, ...) with its own onset
        instead of re-opening it."""
        rid = self._same_incident(finding) or self._current.get(finding.key, finding.key)
        old = self._filed.get(rid)
        if renew and old is not None and not old.open:
            n = 2
            while f"{finding.key}#{n}" in self._filed:
                n += 1
            rid = self._current[finding.key] = f"{finding.key}#{n}"
            old = None
        report = finding.report().with_updates(id=rid)
        if old is None:
            report = report.with_updates(revision=0, last_seen_ns=now)
        else:
            report = report.with_updates(
                first_seen_ns=min(old.report.first_seen_ns, report.first_seen_ns),
                revision=old.report.revision + 1,
                last_seen_ns=max(now, old.report.last_seen_ns))
            if _same(old.report, report):
                # nothing the user sees changed: no new revision
                self._filed[rid] = Filed(finding, report.with_updates(
                    revision=old.report.revision))
                return rid
        self._filed[rid] = Filed(finding, report)
        self._changed.add(rid)
        return rid

    def resolve(self, fault_id: str, now: int, why: str, *, cleared: bool = False) -> None:
        """End an open incident with the reason: ``cleared`` when the fault happened and
        ended (a hang whose call finished, slowness back to its baseline: an incident a
        post-mortem lists, from its onset to its last time seen); otherwise it is withdrawn
        (superseded, explained by another report, not borne out)."""
        fault_id = self._current.get(fault_id, fault_id)
        old = self._filed.get(fault_id)
        if old is None or not old.open:
            return
        evidence = dict(old.report.evidence)
        evidence["resolved"] = why
        if cleared:
            evidence["cleared"] = True
        report = old.report.with_updates(state="resolved", revision=old.report.revision + 1,
                                         last_seen_ns=now, evidence=evidence)
        self._filed[fault_id] = replace(old, report=report, resolution=why, cleared=cleared)
        self._changed.add(fault_id)

    def _same_incident(self, finding: Finding) -> str | None:
        """The open report of the same kind that blames one of the finding's culprits."""
        if finding.kind not in BY_CULPRITS or not finding.culprits:
            return None
        current = self._current.get(finding.key, finding.key)
        mine = self._filed.get(current)
        if mine is not None and mine.open:
            return current
        blamed = set(finding.culprits)
        for rid, f in self._filed.items():
            if f.open and f.finding.kind == finding.kind and blamed & set(f.finding.culprits):
                return rid
        return None

    # ----- reading ----------------------------------------------------------------------------
    def get(self, fault_id: str) -> FaultReport | None:
        """The report of that id (of a key: its latest incident)."""
        f = self.filed(fault_id)
        return f.report if f is not None else None

    def filed(self, fault_id: str) -> Filed | None:
        return self._filed.get(self._current.get(fault_id, fault_id))

    def finding(self, fault_id: str) -> Finding | None:
        """The latest finding of that incident (its typed state)."""
        f = self.filed(fault_id)
        return f.finding if f is not None else None

    def open_ids(self, kind: str) -> list[str]:
        return [k for k, f in self._filed.items() if f.finding.kind == kind and f.open]

    def open_findings(self, kind: str) -> list[tuple[str, Finding]]:
        return [(k, f.finding) for k, f in self._filed.items()
                if f.finding.kind == kind and f.open]

    def covering(self, kind: str, culprits: set[int], start: int, end: int) -> str | None:
        """A report (open, or ended in any way) of ``kind`` that blames one of ``culprits``
        over some of [start, end]: the same incident seen by another detector."""
        for rid, f in self._filed.items():
            r = f.report
            if f.finding.kind == kind and culprits & set(f.finding.culprits) \
                    and r.first_seen_ns <= end and r.last_seen_ns >= start:
                return rid
        return None

    def changed(self) -> list[FaultReport]:
        out = [self._filed[k].report for k in self._changed]
        self._changed.clear()
        out.sort(key=lambda r: (r.first_seen_ns, r.id))
        return out

    def incidents(self) -> list[FaultReport]:
        """Every fault that happened: open, or ended because it cleared."""
        return sorted((f.report for f in self._filed.values() if f.open or f.cleared),
                      key=lambda r: (r.first_seen_ns, r.id))

    def all(self) -> list[FaultReport]:
        return sorted((f.report for f in self._filed.values()),
                      key=lambda r: (r.first_seen_ns, r.id))


def _same(a: FaultReport, b: FaultReport) -> bool:
    return (a.kind == b.kind and a.suspects == b.suspects and a.summary == b.summary
            and a.state == b.state and a.pg == b.pg and a.seq == b.seq
            and a.first_seen_ns == b.first_seen_ns)
