"""Probe verdicts fold back into a fault report: a suspect whose host a probe confirmed scores
higher, one whose host a probe cleared is dropped, and the verdicts go into the evidence."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from c4.report import FaultReport, Suspect
from diagnosis.probes.plans import CLEARED, CONFIRMED, Verdict

#: A confirmed suspect's score moves this share of the way to 1.
CONFIRM_BOOST = 0.5


def host_of_suspect(s: Suspect, rank_host: Mapping[int, str] | None = None) -> list[str]:
    """The hosts a suspect lives on, from the topology's id conventions (``node003/gpu1``,
    ``node003/nic0``; a link names the hosts of its NIC ends); ``rank_host`` places ranks.
    A switch lives on no host."""
    if s.type == "host":
        return [s.id]
    if s.type == "rank":
        r = s.rank if s.rank is not None else _int(s.id)
        host = (rank_host or {}).get(r) if r is not None else None
        return [host] if host else []
    if s.type in ("gpu", "nic"):
        return [s.id.split("/", 1)[0]] if "/" in s.id else []
    if s.type == "link":
        return [end.split("/", 1)[0] for end in s.id.split("~") if "/" in end]
    return []


def apply_probes(report: FaultReport, verdicts: Sequence[Verdict], *,
                 host_of: Callable[[Suspect], list[str]] | None = None,
                 boost: float = CONFIRM_BOOST) -> FaultReport:
    """The report with its suspects re-scored by the probes' verdicts, most likely first.

    A suspect on a confirmed host gains ``boost`` of its distance to 1; a suspect whose hosts
    were all cleared is dropped (a link between a cleared and an unprobed host stays);
    others keep their score. The verdicts go into ``evidence["probes"]``."""
    if not 0.0 <= boost <= 1.0:
        raise ValueError(f"boost must be in [0, 1], got {boost}")
    where = host_of or host_of_suspect
    by_host = {v.host: v for v in verdicts}
    kept: list[Suspect] = []
    dropped: list[str] = []
    confirmed: list[str] = []
    for s in report.suspects:
        hosts = where(s)
        states = [by_host[h].status for h in hosts if h in by_host]
        if CONFIRMED in states:
            kept.append(replace(s, score=s.score + (1.0 - s.score) * boost))
            confirmed.append(f"{s.type} {s.id}")
        elif hosts and len(states) == len(hosts) and all(st == CLEARED for st in states):
            dropped.append(f"{s.type} {s.id}")
        else:
            kept.append(s)
    kept.sort(key=lambda s: -s.score)
    notes = []
    if confirmed:
        notes.append(f"probes confirmed {', '.join(confirmed)}")
    if dropped:
        notes.append(f"probes cleared {', '.join(dropped)}")
    summary = report.summary + (f" ({'; '.join(notes)})" if notes else "")
    evidence = {**report.evidence,
                "probes": [*report.evidence.get("probes", []), *(v.to_json() for v in verdicts)]}
    return report.with_updates(suspects=tuple(kept), summary=summary, evidence=evidence)


def _int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        return None
