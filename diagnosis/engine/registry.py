"""The engine's reports by id: new evidence for an open fault updates its report (same id, next
revision) instead of filing another; a hang whose call finishes after all is withdrawn. A slow
fault that comes back re-opens its report; a new hang where an earlier one was resolved is a
new incident, filed under a new id."""

from __future__ import annotations

from c4.report import FaultReport


class Registry:
    def __init__(self) -> None:
        self._reports: dict[str, FaultReport] = {}
        self._changed: set[str] = set()
        self._current: dict[str, str] = {}      # base id -> id of its latest incident

    def put(self, report: FaultReport, now: int, renew: bool = False) -> str:
        """File or update ``report``; returns the id it is filed under. ``renew``: if the report
        of that id was resolved, file a new incident (``id#2``, ``id#3``, ...) instead of
        re-opening it, with its own first-seen time."""
        rid = self._current.get(report.id, report.id)
        old = self._reports.get(rid)
        if renew and old is not None and old.state != "open":
            n = 2
            while f"{report.id}#{n}" in self._reports:
                n += 1
            rid = self._current[report.id] = f"{report.id}#{n}"
            old = None
        if rid != report.id:
            report = report.with_updates(id=rid)
        if old is not None:
            report = report.with_updates(
                first_seen_ns=min(old.first_seen_ns, report.first_seen_ns),
                revision=old.revision + 1, last_seen_ns=max(now, old.last_seen_ns))
            if _same(old, report):
                self._reports[report.id] = report.with_updates(revision=old.revision)
                return rid
        else:
            report = report.with_updates(revision=0, last_seen_ns=now)
        self._reports[report.id] = report
        self._changed.add(report.id)
        return rid

    def resolve(self, fault_id: str, now: int, why: str, *, cleared: bool = False) -> None:
        """Resolve a report: ``cleared`` when the fault happened and ended (a hang whose call
        finished, slowness back to its baseline: an incident a post-mortem lists, from its
        first to its last time seen); otherwise it is withdrawn (superseded, explained by
        another report, not borne out)."""
        fault_id = self._current.get(fault_id, fault_id)
        old = self._reports.get(fault_id)
        if old is None or old.state != "open":
            return
        evidence = dict(old.evidence)
        evidence["resolved"] = why
        if cleared:
            evidence["cleared"] = True
        self._reports[fault_id] = old.with_updates(state="resolved", revision=old.revision + 1,
                                                   last_seen_ns=now, evidence=evidence)
        self._changed.add(fault_id)

    def get(self, fault_id: str) -> FaultReport | None:
        """The report of that id (of a base id: its latest incident)."""
        return self._reports.get(self._current.get(fault_id, fault_id))

    def open_ids(self, kind: str) -> list[str]:
        return [k for k, r in self._reports.items() if r.kind == kind and r.state == "open"]

    def changed(self) -> list[FaultReport]:
        out = [self._reports[k] for k in sorted(self._changed)]
        self._changed.clear()
        out.sort(key=lambda r: (r.first_seen_ns, r.id))
        return out

    def incidents(self) -> list[FaultReport]:
        """Every fault that happened: open, or resolved because it cleared."""
        return [r for r in self.all() if r.state == "open" or r.evidence.get("cleared")]

    def all(self) -> list[FaultReport]:
        return sorted(self._reports.values(), key=lambda r: (r.first_seen_ns, r.id))


def _same(a: FaultReport, b: FaultReport) -> bool:
    return (a.kind == b.kind and a.suspects == b.suspects and a.summary == b.summary
            and a.state == b.state and a.pg == b.pg and a.seq == b.seq)
