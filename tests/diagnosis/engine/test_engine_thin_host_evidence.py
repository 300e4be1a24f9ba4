"""When a slow host found from sampled calls becomes a report (``SlowReports.noncomm``,
diagnosis/engine/slow_reports.py): one test of a group's pace stands for all its members, so
its eight findings are one piece of evidence, not eight. A host whose evidence so counted is
thin waits a pass; strong evidence, or members found late each on their own, is reported at
once (as bench.accuracy.hard's start-slow_switch-512-1 at K = 16: host node019 6% behind in
4 of 6 buckets at one pass, logp -7.5, gone at the next, reported as a slow host)."""

from __future__ import annotations

from diagnosis.engine import Engine
from diagnosis.engine.slow import SlowRank

T0 = 10_000_000_000
HOST = "node019"
RANKS = list(range(8, 16))


def engine() -> Engine:
    eng = Engine()
    for r in range(16):
        eng.add_rank(r, f"node{18 + r // 8:03d}", f"node{18 + r // 8:03d}/gpu{r % 8}")
    eng.add_group("tp.18", range(8))
    eng.add_group("tp.19", RANKS)
    return eng


def whole_group(eng: Engine, logp: float, samples: int = 6) -> list[SlowRank]:
    """The group's pace behind from a change point on, over ``samples`` buckets since: every
    member carries its one test."""
    g = eng.arena.names.index("tp.19")
    return [SlowRank(r, g, T0, 0.064, 0.25e6, samples, 0.67, 0.0, logp, whole_group=True)
            for r in RANKS]


def each_late(eng: Engine, logp: float) -> list[SlowRank]:
    """Every member found late on its own (its own lateness series)."""
    g = eng.arena.names.index("tp.19")
    return [SlowRank(r, g, T0, 0.3, 1.2e6, 20, 0.9, 0.01, logp) for r in RANKS]


def _open(eng: Engine) -> list[str]:
    return eng.reporter.open_ids("noncomm_slow")


def test_one_thin_pace_test_found_at_one_pass_only_is_not_reported():
    eng = engine()
    eng.slow_reports.noncomm(whole_group(eng, -7.5), now=T0, sample=16)
    assert _open(eng) == []
    eng.slow_reports.noncomm([], now=T0 + 3 * 10**9, sample=16)
    eng.slow_reports.noncomm(whole_group(eng, -7.5), now=T0 + 6 * 10**9, sample=16)
    assert _open(eng) == []


def test_a_thin_pace_test_found_again_at_the_next_pass_is_reported():
    eng = engine()
    eng.slow_reports.noncomm(whole_group(eng, -7.5), now=T0, sample=16)
    eng.slow_reports.noncomm(whole_group(eng, -8.0, samples=7), now=T0 + 3 * 10**9, sample=16)
    assert _open(eng) == [f"noncomm_slow:host:{HOST}"]


def test_a_thin_pace_test_found_again_on_the_same_buckets_is_not_reported():
    """Two passes with no bucket written between (the last two of a trace: its last records,
    then its end, which writes the buckets still open) judge the same samples: the second
    confirms nothing. (bench.accuracy.run's rail slow_switch-512-1 at K = 64 over 80
    iterations: a healthy host 4-8% behind in the last four buckets, found at both.)"""
    eng = engine()
    eng.slow_reports.noncomm(whole_group(eng, -12.6, samples=4), now=T0, sample=64)
    eng.slow_reports.noncomm(whole_group(eng, -12.6, samples=4), now=T0 + 10**8, sample=64)
    assert _open(eng) == []
    eng.slow_reports.noncomm(whole_group(eng, -15.0, samples=5), now=T0 + 2 * 10**9,
                             sample=64)
    assert _open(eng) == [f"noncomm_slow:host:{HOST}"]


def test_strong_evidence_is_reported_at_once():
    eng = engine()
    eng.slow_reports.noncomm(whole_group(eng, -82.0), now=T0, sample=16)
    assert _open(eng) == [f"noncomm_slow:host:{HOST}"]
    eng = engine()
    # eight members' own tests, each thin, together strong
    eng.slow_reports.noncomm(each_late(eng, -7.5), now=T0, sample=16)
    assert _open(eng) == [f"noncomm_slow:host:{HOST}"]
