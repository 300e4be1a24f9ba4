"""Scoring fault reports (shared specs section 3) against the simulator's ground truth.

The matching rule, exactly:

* A report **addresses** an injected fault when its ``kind`` equals the fault's
  ``expected_report`` and it is not about an earlier time: when the bench streamed the trace,
  the report first appeared (``detected_ns``) at or after the onset; and its ``first_seen_ns``
  is at or after the start of the iteration ``ONSET_SLACK_ITERS`` (5) before the onset
  iteration, less 1 ms of clock skew (a detector's change-point estimate of the onset may come a
  few samples early; how early is reported as the onset error). Reports of another kind never
  count for the fault, even when they name the right component.
* A suspect **names** the fault when ``(type, id)`` is in the fault's ``accept`` list (written by
  the simulator). That list holds the faulty component itself, plus only these equivalents:
  for a NIC with a single cable to the fabric, that cable; for such a cable, that NIC (the two
  lie on exactly the same paths, so timing cannot tell them apart); for a GPU fault, the rank
  running on that GPU as a ``rank`` suspect (what a detector without topology can say). A
  dual-port NIC and one of its two cables never stand in for each other (a faulty port is
  named by its cable; the simulator lists the NIC as ``equivalent`` only when every
  connection it carried used that port). A host, switch, an uplink, or a GPU's host never
  stands in for anything else. Link ids compare with their two endpoints sorted.
* **top-1**: some addressing report has a first suspect that names the fault, and every
  suspect sharing that first score names it too (a NIC and its cable may tie; a tie with
  anything else does not single the fault out, whichever of them is listed first).
  **top-1 up to equivalence** (a separate, labelled column, never the headline): the same with
  the fault's ``equivalent`` components also accepted, i.e. those crossed by exactly the same
  connections (which no timing can tell apart); it shows how much of a miss is ambiguity.
  **ambiguous** (counted apart, never a hit): no top-1, but some addressing report names the
  fault with the same score as its first suspect, and every suspect with that score is an
  accepted or ``equivalent`` component (at least one of them only equivalent), whatever their
  order: the report says "one of these, equally likely" and the ground truth agrees that no
  timing could tell them apart. Headline top-1 % is over the observable
  faults that are not ambiguous; an engine cannot reach this column by naming everything
  equally, since it needs the ground truth's equivalence and an exact tie.
  **top-3**: some addressing report names it among its first three suspects.
  **detected**: some addressing report exists, whatever it names.
* A report is **explained** when it addresses some fault and names it among its first three
  suspects, or addresses it and names no suspect at all (a hang certain but not placed: it
  detects the fault, is never a top-1 or top-3 hit, and points no one at a wrong component);
  every other report is a **false report** (on a healthy run, every report is).
  A fault scenario is **clean** when every fault is top-1 (or ambiguous) and no report is
  false.
* **Latency**: from the fault's onset (for hangs and errors: ``event_ns``, the moment the rank
  stopped or the transfer stuck) to the earliest report that addresses and names it
  (top-3), in seconds of trace time and in iterations begun since the onset. The time of a
  report is ``detected_ns`` when the bench streamed the trace and saw when the report first
  appeared (online latency), else its ``first_seen_ns`` (evidence latency, clamped at 0).
  **Onset error**: that report's ``first_seen_ns`` minus the true onset or event (negative:
  early).
* Faults the ground truth marks not ``observable`` (for example an uplink slowed yet still
  faster than the flows through it, or an onset after recording stopped) are listed apart and
  are neither hits nor misses; reports about them are still false reports.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SKEW_NS = 1_000_000
ONSET_SLACK_ITERS = 5


@dataclass(frozen=True)
class FaultScore:
    kind: str
    expected: str
    observable: bool
    detected: bool
    top1: bool
    top3: bool
    top1_equiv: bool = False
    ambiguous: bool = False
    latency_s: float | None = None
    latency_iters: int | None = None
    onset_error_s: float | None = None
    spec: str = ""


@dataclass(frozen=True)
class ScenarioScore:
    faults: tuple[FaultScore, ...]
    reports: int
    false_reports: int
    iterations: int
    false_kinds: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.faults

    @property
    def clean(self) -> bool:
        return self.false_reports == 0 and all(f.top1 or f.ambiguous
                                               for f in self.faults if f.observable)


def canonical(sus: dict[str, Any]) -> tuple[str, str]:
    """The (type, id) a suspect or accepted component stands for."""
    typ = str(sus.get("type", ""))
    if typ == "rank":
        return typ, str(sus.get("rank", sus.get("id")))
    ident = str(sus.get("id", ""))
    if typ == "link" and "~" in ident:
        ident = "~".join(sorted(ident.split("~")))
    return typ, ident


def _addresses(report: dict[str, Any], fault: dict[str, Any], starts: list[int]) -> bool:
    onset = fault.get("onset_ns")
    if report.get("kind") != fault["expected_report"] or onset is None:
        return False
    if "detected_ns" in report and int(report["detected_ns"]) < onset - SKEW_NS:
        return False
    i = fault["onset_iteration"] - ONSET_SLACK_ITERS
    earliest = starts[i] if 0 <= i < len(starts) else (onset if i >= 0 else 0)
    return int(report.get("first_seen_ns", 0)) >= earliest - SKEW_NS


def _rank_of_hit(report: dict[str, Any], accept: set[tuple[str, str]]) -> int | None:
    """Position (0-based) of the first suspect that names the fault, or None."""
    for pos, sus in enumerate(report.get("suspects") or []):
        if canonical(sus) in accept:
            return pos
    return None


def _top_tie(report: dict[str, Any], accept: set[tuple[str, str]],
             equiv: set[tuple[str, str]]) -> str | None:
    """How the report's top-scored suspects (all with the first one's score) stand to the
    fault: "alone" (they name it and nothing else), "ambiguous" (it and components the ground
    truth calls indistinguishable), "crowded" (it and some other component), None (absent)."""
    sus = report.get("suspects") or []
    if not sus:
        return None
    first = sus[0].get("score")
    tie = {canonical(x) for x in sus if x.get("score") == first}
    if not tie & accept:
        return None
    if tie <= accept:
        return "alone"
    return "ambiguous" if tie <= accept | equiv else "crowded"


def score_scenario(truth: dict[str, Any], reports: Sequence[dict[str, Any]]) -> ScenarioScore:
    """Score one run's reports against its ground truth document."""
    starts = truth.get("iteration_start_ns") or []
    explained = [False] * len(reports)
    scores = []
    for fault in truth.get("faults", []):
        accept = {canonical(a) for a in fault["accept"]}
        equiv = accept | {canonical(a) for a in fault.get("equivalent", [])}
        top1_equiv = alone = tied = False
        best: int | None = None
        detected = False
        first_t: int | None = None
        first_seen: int | None = None
        for i, rep in enumerate(reports):
            if not _addresses(rep, fault, starts):
                continue
            detected = True
            if not rep.get("suspects"):
                explained[i] = True
                continue
            top1_equiv |= _rank_of_hit(rep, equiv) == 0
            how = _top_tie(rep, accept, equiv)
            alone |= how == "alone"
            if how == "ambiguous":
                tied = explained[i] = True
            pos = _rank_of_hit(rep, accept)
            if pos is None or pos > 2:
                continue
            explained[i] = True
            best = pos if best is None else min(best, pos)
            t = int(rep.get("detected_ns", rep["first_seen_ns"]))
            if first_t is None or t < first_t:
                first_t, first_seen = t, int(rep["first_seen_ns"])
        lat_s = lat_i = err = None
        if first_t is not None and first_seen is not None:
            onset = fault["onset_ns"]
            event = fault.get("event_ns") or onset
            err = (first_seen - event) / 1e9
            lat_s = max(0.0, (first_t - event) / 1e9)
            lat_i = max(0, bisect.bisect_right(starts, first_t) - 1 - fault["onset_iteration"])
        scores.append(FaultScore(
            kind=fault["kind"], expected=fault["expected_report"],
            observable=bool(fault.get("observable", True)), detected=detected,
            top1=alone, top3=best is not None, top1_equiv=top1_equiv,
            ambiguous=not alone and tied, latency_s=lat_s,
            latency_iters=lat_i,
            onset_error_s=err, spec=fault.get("spec", "")))
    false = [r for r, ok in zip(reports, explained) if not ok]
    return ScenarioScore(tuple(scores), len(reports), len(false),
                         int(truth.get("iterations", len(starts))),
                         tuple(str(r.get("kind")) for r in false))


@dataclass
class Row:
    """One line of the results table: one fault kind (or healthy) at one size."""

    label: str
    gpus: int
    scenarios: int = 0
    faults: int = 0
    unobservable: int = 0
    ambiguous: int = 0
    detected: int = 0
    top1: int = 0
    top3: int = 0
    top1_equiv: int = 0
    clean: int = 0
    false_reports: int = 0
    iterations: int = 0
    latency_s: list[float] = field(default_factory=list)
    latency_iters: list[int] = field(default_factory=list)
    onset_error_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def pct(self, n: int) -> float | None:
        return 100.0 * n / self.faults if self.faults else None

    @property
    def identifiable(self) -> int:
        """Observable faults that are not ambiguous: the headline top-1's denominator."""
        return self.faults - self.ambiguous

    def top1_pct(self) -> float | None:
        return 100.0 * self.top1 / self.identifiable if self.identifiable else None

    @property
    def false_per_1000_iters(self) -> float:
        return 1000.0 * self.false_reports / self.iterations if self.iterations else 0.0

    def to_json(self) -> dict[str, Any]:
        def q(v: list[float], p: float) -> float | None:
            return float(np.percentile(v, p)) if v else None
        return {
            "label": self.label, "gpus": self.gpus, "scenarios": self.scenarios,
            "faults": self.faults, "unobservable": self.unobservable,
            "ambiguous": self.ambiguous,
            "detected_pct": self.pct(self.detected), "top1_pct": self.top1_pct(),
            "top3_pct": self.pct(self.top3), "top1_equiv_pct": self.pct(self.top1_equiv),
            "clean_pct": 100.0 * self.clean / self.scenarios if self.scenarios else None,
            "false_reports": self.false_reports, "iterations": self.iterations,
            "false_per_1000_iters": self.false_per_1000_iters,
            "latency_s_median": q(self.latency_s, 50), "latency_s_p90": q(self.latency_s, 90),
            "latency_iters_median": q(self.latency_iters, 50),
            "latency_iters_p90": q(self.latency_iters, 90),
            "onset_error_s_median": q(self.onset_error_s, 50),
            "failures": self.failures,
        }


def summarize(results: Iterable[tuple[str, int, ScenarioScore, str]]) -> list[Row]:
    """Aggregate (label, gpus, score, scenario name) into rows, one per label and size."""
    rows: dict[tuple[str, int], Row] = {}
    for label, gpus, sc, name in results:
        row = rows.setdefault((label, gpus), Row(label, gpus))
        row.scenarios += 1
        row.false_reports += sc.false_reports
        row.iterations += sc.iterations
        row.clean += sc.clean
        missed = []
        for f in sc.faults:
            if not f.observable:
                row.unobservable += 1
                continue
            row.faults += 1
            row.detected += f.detected
            row.top1 += f.top1
            row.top3 += f.top3
            row.top1_equiv += f.top1_equiv
            row.ambiguous += f.ambiguous
            if f.latency_s is not None:
                row.latency_s.append(f.latency_s)
                row.latency_iters.append(int(f.latency_iters or 0))
            if f.onset_error_s is not None:
                row.onset_error_s.append(f.onset_error_s)
            if not f.top1:
                missed.append(f"{f.spec}: " + ("ambiguous (tied with equivalents)"
                                               if f.ambiguous else
                                               "wrong top suspect" if f.top3 else
                                               "not in top 3" if f.detected else
                                               f"no {f.expected} report"))
        if missed or sc.false_reports:
            extra = (f" +{sc.false_reports} false ({','.join(sorted(set(sc.false_kinds)))})"
                     if sc.false_reports else "")
            what = "; ".join(missed) or ("healthy run" if not sc.faults else "localized")
            row.failures.append(f"{name}: {what}{extra}")
    return sorted(rows.values(), key=lambda r: (r.gpus, r.label == "healthy", r.label))



def latency_deltas(results: Iterable[tuple[int, int, str, int, ScenarioScore]], base: int = 1
                   ) -> dict[int, dict[tuple[int, str], list[float]]]:
    """Paired latency differences between sampling factors: for each factor K other than
    ``base``, per (gpus, label), the latency at K minus the latency at ``base`` of every
    observable fault that has a latency at both (found among the first three suspects), on the
    same scenario (seed) and fault. ``results``: (K, gpus, label, seed, score) per run."""
    lat: dict[int, dict[tuple[int, str, int, int], float]] = {}
    for k, gpus, label, seed, sc in results:
        mine = lat.setdefault(k, {})
        for i, f in enumerate(sc.faults):
            if f.observable and f.latency_s is not None:
                mine[(gpus, label, seed, i)] = f.latency_s
    ref = lat.get(base, {})
    out: dict[int, dict[tuple[int, str], list[float]]] = {}
    for k, mine in lat.items():
        if k == base:
            continue
        cells = out.setdefault(k, {})
        for key, t in mine.items():
            if key in ref:
                cells.setdefault(key[:2], []).append(t - ref[key])
    return out
