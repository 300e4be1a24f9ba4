"""The records budget of a job: K from the job's full call rate and what its other records
leave, as a power of two, announced per communicator ahead of its fastest member; windows
lengthen when K is at its cap (or progress and linkstat alone are over)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.daemon.budget import BudgetConfig, JobBudget

NS = 1_000_000_000


def _run(b: JobBudget, seconds: int, *, calls: float, ranks: int = 4, progress: float = 0,
         linkstat: float = 0, t0: float = 0.0, seq0: int = 0, pgs=("0", "1")):
    """Feed ``seconds`` of a job making ``calls`` calls/s (over ``ranks`` ranks), shipping op
    rows at the budget's current K; returns the decisions made once a second."""
    decisions = []
    per_rank = calls / ranks
    for s in range(seconds):
        now = t0 + s + 1
        rs = np.arange(ranks)
        b.recorded(rs, np.full(ranks, int(per_rank * now)), int(now * NS) + rs * 1000)
        b.observe("ops", int(calls / b.sample), now)
        b.observe("progress", int(progress), now)
        b.observe("linkstat", int(linkstat), now)
        top = seq0 + int((s + 1) * calls / ranks / len(pgs))
        b.observe_seqs({pg: top for pg in pgs}, now)
        d = b.decide(now, int(now * NS))
        if d is not None:
            decisions.append((now, d))
    return decisions


def test_a_job_that_fits_keeps_every_call():
    b = JobBudget(BudgetConfig(records_per_s=10_000))
    assert _run(b, 60, calls=8_000) == []
    assert b.sample == 1


def test_k_is_the_power_of_two_that_fits_and_s_is_ahead_of_the_fastest_member():
    b = JobBudget(BudgetConfig(records_per_s=10_000, margin_s=5, hold_s=10))
    decisions = _run(b, 12, calls=100_000)
    (now, d), = decisions
    assert d.sample == 16 and b.sample == 16      # 100k/16 = 6.25k <= 10k, 100k/8 > 10k
    for pg in ("0", "1"):
        step = d.new_steps[pg]
        seen = int(now * 100_000 / 4 / 2)
        pace = 100_000 / 4 / 2
        assert step[1] == 16
        assert seen + 4 * pace <= step[0] <= seen + 6 * pace + 2, "about 5 s of calls ahead"
    assert d.window_ns == 0       # windows untouched


def test_k_comes_down_with_hysteresis_and_nests():
    b = JobBudget(BudgetConfig(records_per_s=10_000, hold_s=10, measure_s=5))
    _run(b, 12, calls=100_000)
    assert b.sample == 16
    # the job slows to 40k calls/s: K=4 would fit (10k), but lower only by halves
    later = _run(b, 60, calls=40_000, t0=12, seq0=10**6)
    ks = [d.sample for _, d in later]
    assert ks[:2] == [8, 4] or ks[:1] == [8]
    assert all(k & (k - 1) == 0 for k in ks)
    assert b.sample in (4, 8) and 40_000 / b.sample <= 10_000


def test_k_does_not_come_down_into_more_than_the_daemon_can_follow():
    b = JobBudget(BudgetConfig(records_per_s=10_000, hold_s=10, measure_s=5))
    _run(b, 12, calls=100_000)
    assert b.sample == 16
    # the job slows to 20k calls/s: K = 4 fits its budget with margin (5k <= 0.6 x 10k), but
    # the daemon follows only 6k/s (its store), 60% of the budget
    b.room = 0.6
    _run(b, 60, calls=20_000, t0=12, seq0=10**6)
    # 20k/4 = 5k > 0.6 x 6k: K stays at 8, the last step whose rate fits with margin
    assert b.sample == 8
    b.room = 1.0
    _run(b, 60, calls=20_000, t0=72, seq0=2 * 10**6)
    assert b.sample == 4, "once the daemon follows the whole budget, K comes down to it"


def test_windows_lengthen_when_progress_and_linkstat_are_over_and_k_is_capped():
    cfg = BudgetConfig(records_per_s=10_000, max_sample=64, hold_s=5, max_window_s=8)
    b = JobBudget(cfg)
    decisions = _run(b, 60, calls=10_000_000, progress=6_000, linkstat=3_000)
    windows = [d.window_ns for _, d in decisions]
    assert b.sample == 64
    # 9,000/s of them in a 3,000/s share: straight from 1 s to the 4 s that holds them, not
    # a doubling a decision
    assert windows[0] == 4 * NS and b.window_ns == 4 * NS
    changed = [d for _, d in decisions if d.window_from_ns]
    assert all(d.window_from_ns % d.window_ns == 0 for d in changed), "on a window boundary"


def test_new_communicators_get_a_step_and_steps_in_force_are_pruned():
    b = JobBudget(BudgetConfig(records_per_s=10_000, hold_s=5))
    _run(b, 10, calls=100_000)
    assert set(b.steps) == {"0", "1"}
    later = _run(b, 20, calls=100_000, t0=10, pgs=("0", "1", "tp.7"))
    whys = [d.why for _, d in later]
    assert any("new communicators" in w for w in whys)
    assert set(b.steps) == {"0", "1", "tp.7"}


def test_versions_grow_across_daemon_restarts():
    a = JobBudget(BudgetConfig(records_per_s=10_000))
    (_, d1), = _run(a, 12, calls=100_000, t0=1000)
    fresh = JobBudget(BudgetConfig(records_per_s=10_000))
    (_, d2), = _run(fresh, 12, calls=100_000, t0=2000)
    assert d2.version > d1.version


def test_no_budget_no_decisions():
    b = JobBudget(BudgetConfig(records_per_s=0))
    assert _run(b, 30, calls=10**7) == [] and b.sample == 1


@pytest.mark.parametrize("bad", [dict(max_sample=12), dict(records_per_s=-1),
                                 dict(window_s=4, max_window_s=2), dict(ops_floor=1.0)])
def test_bad_settings(bad):
    with pytest.raises(ValueError):
        BudgetConfig(**bad)


def test_a_fixed_factor_whatever_the_rate():
    b = JobBudget(BudgetConfig(records_per_s=0, fixed_sample=16))
    ((_, d),) = _run(b, 12, calls=1_000)
    assert (d.default, d.sample, d.new_steps) == (16, 16, {}), "the default from the start"


def test_a_large_job_starts_sampled_from_its_size_then_follows_its_rate():
    b = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=400, hold_s=5))
    b.world = 16_384
    first = b.decide(0.5, NS // 2)
    assert first is not None and first.default == 128 and first.steps == {}
    # ~10 progress keys and sockets per rank: 164k windowed records/s at 1 s, over the half
    # of the budget they may take; at 2 s they fit
    assert first.window_ns == 2 * NS and first.window_from_ns % (2 * NS) == 0
    assert first.window_from_ns >= NS // 2 + 5 * NS, "ahead of the sidecars, by the margin"
    # it turns out to make 50 calls/s per rank (819k/s): K comes down, per communicator
    later = _run(b, 40, calls=16_384 * 50, ranks=16_384 // 512, t0=1)
    assert later and all(d.default == 128 for _, d in later)
    assert b.sample < 128 and all(steps[-1][1] == b.sample for steps in b.steps.values())
    small = JobBudget(BudgetConfig(records_per_s=200_000))
    small.world = 64
    assert small.decide(0.5, NS // 2) is None, "a job that fits starts with every call"


def test_the_largest_jobs_start_at_the_longest_window_their_size_calls_for():
    b = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=400))
    b.world = 131_072
    first = b.decide(0.5, NS // 2)
    # 52M calls/s: K at its cap; 1.3M windowed records a window: 16 s windows bring them to
    # 82k/s, under the 100k/s they may take
    assert first is not None and (first.default, first.window_ns) == (1024, 16 * NS)
    assert "windows of 16 s" in first.why
    # its calls are measured before its first 16 s window closes: the window stays
    later = _run(b, 30, calls=131_072 * 400, ranks=64, t0=1)
    assert all(d.window_ns == 16 * NS for _, d in later), [d.why for _, d in later]
    capped = JobBudget(BudgetConfig(records_per_s=200_000, max_window_s=4))
    capped.world = 131_072
    assert capped.decide(0.5, NS // 2).window_ns == 4 * NS, "never past --max-window"
    mid = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=0))
    mid.world = 40_000
    d = mid.decide(0.5, NS // 2)
    assert d is not None and (d.default, d.window_ns) == (1, 4 * NS), \
        "the window alone, when the calls are not assumed"


def test_a_job_starts_within_the_share_the_daemon_follows_now():
    full = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=400))
    full.world = 16_384
    d = full.decide(0.5, NS // 2)
    assert (d.default, d.window_ns) == (128, 2 * NS)
    cut = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=400))
    cut.world, cut.scale = 16_384, 0.1             # the governor allows 20k/s
    d = cut.decide(0.5, NS // 2)
    assert (d.default, d.window_ns) == (1024, 16 * NS)
    # cut after the start, before any of its records reached the detectors: started again
    assert full.decide(1.0, NS) is None
    full.scale = 0.1
    d = full.decide(2.0, 2 * NS)
    assert d is not None and (d.default, d.window_ns) == (1024, 16 * NS), d
    assert d.version > 1 and d.window_from_ns % (16 * NS) == 0
    full.scale = 1.0
    assert full.decide(3.0, 3 * NS) is None, "never back down before it is measured"


def test_a_job_cut_before_its_windows_are_measured_lengthens_them_from_its_size():
    """A 16k-rank job starts at 2 s windows; the governor cuts the budget to a third before
    the daemon, behind its stream, has applied any of its windowed records: the windows
    lengthen with its factor, on what its size makes likely."""
    b = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=400))
    b.world = 16_384
    first = b.decide(-20.0, -20 * NS)           # when its ranks registered
    assert first is not None and first.window_ns == 2 * NS
    b.scale = 1 / 3
    d = None
    for s in range(1, 8):
        b.recorded(range(4), [1_638_400 * s] * 4, s * NS + np.arange(4))   # 6.5M calls/s
        b.observe_seqs({"0": 1000 * s}, float(s))
        b.observe("ops", 50_000, float(s))
        d = b.decide(float(s), s * NS)
        if d is not None:
            break
    # 163,840 progress keys and sockets a window into a third of the 100k/s they may take
    assert d is not None and d.window_ns == 8 * NS and s <= 4, (s, d)


def test_within_its_hold_a_job_still_takes_what_sends_less():
    """Ports measured, no call yet (a large job still registering): K would come down, which
    the hold forbids; the windows a cut share calls for still lengthen."""
    b = JobBudget(BudgetConfig(records_per_s=200_000, calls_per_rank=400))
    b.world = 16_384
    assert b.decide(0.0, 0).window_ns == 2 * NS
    b.scale = 0.1
    b.observe_seqs({"0": 0}, 0.5)               # a communicator seen: no fresh start
    for s in range(1, 6):
        b.observe("port", 2_048, float(s))
        b.recorded(range(4), [0] * 4, s * NS + np.arange(4))
        d = b.decide(float(s), s * NS)
        if d is not None:
            break
    assert d is not None and d.window_ns == 16 * NS and d.sample == 128, d


def test_windowed_records_count_by_window_not_by_arrival():
    """A daemon behind its stream still sees the job's demand: records per window."""

    b = JobBudget(BudgetConfig(records_per_s=10_000, hold_s=5, max_sample=64, max_window_s=8))
    for s in range(1, 13):
        # 8,000 progress records a window, of which only a quarter arrive each second
        ends = np.full(2_000, s * NS)
        b.observe_windows("progress", ends, NS)
        b.observe_windows("progress", np.full(2_000, s * NS), NS)
        b.observe_windows("progress", np.full(4_000, (s - 1) * NS), NS)
    assert b.rates(12.0)["progress"] == 8_000
    # the job's calls fit at K=64, the windowed records alone do not: windows lengthen
    d = None
    for s in range(12, 20):
        b.recorded(range(4), [100 * s] * 4, s * NS + np.arange(4))
        b.observe_seqs({"0": 1000 * s}, float(s))
        b.observe("ops", 1, float(s))
        d = b.decide(float(s), s * NS) or d
    assert d is not None and d.window_ns == 2 * NS and d.window_from_ns % (2 * NS) == 0


def test_the_full_rate_comes_from_each_collectors_own_counts_and_clock():
    b = JobBudget(BudgetConfig(records_per_s=1e9))
    ranks = np.arange(4)
    for s in range(1, 40):
        counts = np.array([100, 100, 100, 300]) * s
        if s >= 30:
            counts[0] = 100 * (s - 30)        # rank 0's collector restarted at 30 s
        b.recorded(ranks, counts, s * NS + ranks)
        # a report delayed on its way (older than the one before it) changes nothing
        b.recorded([3], [300 * (s - 2)], [(s - 2) * NS])
    assert b.full_rate(40.0) == pytest.approx(600, rel=0.01)
