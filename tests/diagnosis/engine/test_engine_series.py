"""The change-point scan behind every slow detector (diagnosis/engine/series.py)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from diagnosis.engine.series import (
    CHANGE_LEAST,
    SeriesBank,
    binom_logsf,
    change_point,
    excess_sigma,
    on_slow_rows,
    recurrence,
    recurrence_least,
    robust_sigma,
)


def test_significance_is_the_best_split_while_the_onset_is_the_purest():
    """An intermittent fault: late two samples out of four from sample 45 (a late pair at 45-46,
    then an early sample, then pairs again). Starting at 45 gives the strongest evidence (10 late
    of 19); a later start is purer. The onset may be the purer one, but the test must be the
    scan's best split, else an intermittent fault loses the evidence of its first episode."""
    row = np.full(64, 0.01)
    for i in (45, 46, 49, 50, 53, 54, 57, 58, 61, 62):
        row[i] = 0.8
    row[49] = 0.07
    res = change_point(row[None, :], np.array([0.03]), np.array([0.03]), 6)
    best = float(binom_logsf(np.array([10]), np.array([19]), np.array([0.03]))[0])
    assert res.start[0] >= 45
    assert np.isclose(res.logp[0], best)


def test_noise_alone_has_no_significant_split():
    rng = np.random.default_rng(1)
    rows = rng.normal(0.0, 0.01, (200, 64))
    res = change_point(rows, np.full(200, 0.03), np.full(200, 0.03), 6)
    assert (res.logp > np.log(1e-6)).all()


def test_recurrence_counts_episodes_not_slow_samples():
    """Slow one sample in three from sample 30: ten episodes. A congestion of four samples in a
    row is one episode, however slow; and a row that is slow all along has one."""
    from diagnosis.engine.series import episode_rate, recurrence

    rows = np.full((3, 64), 0.01)
    rows[0, 30::3] = 1.5
    rows[1, 20:24] = 3.0
    rows[2, 10:] = 1.0
    thr = np.full(3, 0.15)
    res = recurrence(rows, thr, np.full(3, 0.002), 3)
    assert res.start[0] == 30 and res.episodes[0] == 12 and res.hits[0] == 12
    assert res.count[0] == 34 and np.isclose(res.median[0], 1.5)
    expected = float(binom_logsf(np.array([12]), np.array([34]), np.array([0.002]))[0])
    assert np.isclose(res.logp[0], expected) and res.logp[0] < np.log(1e-9)
    assert res.start[1] == -1 and res.start[2] == -1
    # the rate of episode starts per sample, the faulty rows (the top tenth) left out
    assert np.isclose(episode_rate(rows, thr, 1e-6, trim=0.0), (12 + 1 + 1) / (3 * 64))


def test_a_recurrence_begins_at_its_first_strong_episode():
    """Slow 1.5x one sample in three from sample 30, and one sample just above the threshold
    at 20 (noise): the binomial tail is lowest from sample 20 (one episode more for ten
    samples more), but the recurrence began at 30, where its onset is told. A weak episode in
    the rhythm of the slow ones (its sample grazed the first slow iteration) is its first."""
    from diagnosis.engine.series import recurrence

    row = np.full((1, 64), 0.01)
    row[0, 30::3] = 1.5
    row[0, 20] = 0.2
    res = recurrence(row, np.array([0.15]), np.array([0.0005]), 3)
    assert res.start[0] == 30 and res.count[0] == 34
    assert res.episodes[0] == 12 and res.hits[0] == 12
    # (the test's p-value stays the tail's, from sample 20)
    expected = float(binom_logsf(np.array([13]), np.array([44]), np.array([0.0005]))[0])
    assert np.isclose(res.logp[0], expected)
    row[0, 27] = 0.2
    res = recurrence(row, np.array([0.15]), np.array([0.0005]), 3)
    assert res.start[0] == 27 and res.episodes[0] == 13


def test_missing_samples_neither_break_nor_extend_an_episode():
    from diagnosis.engine.series import recurrence

    row = np.full((1, 20), 0.0)
    row[0, [2, 4, 10, 12]] = 1.0
    row[0, 3] = np.nan          # 2, 4 are one episode around a missing sample
    res = recurrence(row, np.array([0.15]), np.array([0.01]), 2)
    assert res.episodes[0] == 3 and res.hits[0] == 4


def test_excess_noise_holds_when_half_the_samples_are_slow():
    """Every connection 3x slower one round in two (the one switch of a small fabric): the
    pooled median absolute deviation takes the fault for noise; the samples below their
    baseline still tell the noise."""
    rng = np.random.default_rng(5)
    noise = rng.normal(0.0, 0.02, (200, 30))
    slow = np.zeros((200, 30))
    slow[:, 1::2] = 2.0
    excess = noise + slow
    assert robust_sigma(excess) > 1.0                       # the fault read as noise
    assert 0.015 < excess_sigma(excess) < 0.025
    # healthy samples: the same as the pooled estimate
    assert abs(excess_sigma(noise) - float(robust_sigma(noise))) < 0.003


def test_excess_noise_keeps_the_pooled_bound_on_a_baseline_learnt_slow():
    """A baseline learnt on slower warm-up samples puts every later sample below it: the lower
    side is then wider than the noise, and the pooled estimate stays the bound."""
    rng = np.random.default_rng(6)
    excess = rng.normal(-0.3, 0.02, 1000)
    assert abs(excess_sigma(excess) - float(robust_sigma(excess))) < 1e-12
    assert excess_sigma(np.array([np.nan])) != excess_sigma(np.array([np.nan]))    # NaN


def test_judging_only_the_rows_with_enough_slow_samples_changes_nothing():
    # change points and recurrences on the rows that can have one, the rest as a row without
    rng = np.random.default_rng(2)
    for _ in range(10):
        a = rng.normal(0, 0.05, (400, 64))
        a[rng.random(a.shape) < 0.2] = np.nan
        a[rng.random(400) < 0.1, 30:] += 0.3         # some rows turn slow
        a[rng.random(400) < 0.1, 50] = 0.5           # some have one slow sample
        thr = np.full(400, rng.uniform(0.05, 0.2))
        p0 = np.full(400, rng.uniform(0.01, 0.2))
        episodes = int(rng.integers(1, 4))
        for fn, least, args in ((change_point, CHANGE_LEAST, (8,)),
                                (recurrence, recurrence_least(episodes),
                                 (episodes, rng.uniform(0, 3)))):
            want, got = fn(a, thr, p0, *args), on_slow_rows(fn, least, a, thr, p0, *args)
            for f in fields(want):
                assert np.array_equal(getattr(want, f.name), getattr(got, f.name),
                                      equal_nan=True), (fn.__name__, f.name)


def test_episode_marks_carry_a_run_over_missing_samples_wherever_they_lie():
    """Runs of slow samples counted the long way (each sample against the last valid one before
    it), on rows whose missing samples come first (a ring not yet full), between valid ones
    and last, beside complete rows."""
    from diagnosis.engine.series import episode_marks

    rng = np.random.default_rng(3)
    a = rng.random((200, 16))
    a[rng.random(a.shape) < 0.25] = np.nan
    a[:20] = rng.random((20, 16))                 # complete rows
    a[20:40, :5] = np.nan                         # only the oldest missing
    thr = rng.random(200) * 0.5 + 0.25
    valid, high, begins = episode_marks(a, thr)
    for r in range(len(a)):
        prev = False
        for c in range(a.shape[1]):
            if np.isnan(a[r, c]):
                assert not high[r, c] and not begins[r, c] and not valid[r, c]
                continue
            slow = bool(a[r, c] > thr[r])
            assert valid[r, c] and high[r, c] == slow
            assert begins[r, c] == (slow and not prev)
            prev = slow


def test_a_faults_first_episode_does_not_set_the_length_of_a_benign_one():
    """Forty rows of a switch slow for eight samples in a row, then again: their next episode
    is weighed against the benign episodes (rows slow once, two samples each), not against
    their own first one, which would make the eight samples count as one episode."""
    from diagnosis.engine.series import episode_length

    rows = np.full((100, 64), 0.01)
    rows[:40, 40:48] = 1.0                 # the switch's connections: one long episode...
    rows[:40, 52] = 1.0                    # ...and the start of the next
    for i in range(40, 70):                # healthy rows, each slow once for two samples
        rows[i, i - 30:i - 28] = 1.0
    thr = np.full(100, 0.15)
    assert episode_length(rows, thr) == 2.0
    # before the switch's rows came back, their one episode was a benign one as far as
    # anything could tell
    assert episode_length(rows[:, :50], thr) == 8.0


def test_the_newest_samples_are_the_last_of_the_rings_in_order():
    rng = np.random.default_rng(2)
    bank = SeriesBank(8, 0, 1)
    # keys with fewer samples than a ring holds, with a ring gone round, and with none
    for key, n in ((0, 3), (1, 8), (2, 21), (4, 1)):
        t = np.arange(n, dtype=np.int64) * 10 + key
        bank.add(np.full(n, key), rng.uniform(1, 2, n), t)
    keys = np.array([2, 0, 1, 3, 4])
    ring, ring_t = bank.ordered(keys)
    for m in (1, 5, 8, 12):
        new, new_t = bank.newest(keys, m)
        np.testing.assert_array_equal(new, ring[:, -min(m, 8):])
        np.testing.assert_array_equal(new_t, ring_t[:, -min(m, 8):])
    assert bank.newest(keys, 3)[1][0].tolist() == [182, 192, 202]


def test_buckets_without_a_value_do_not_part_a_late_sample_from_the_next():
    """A change point starts on a late sample followed by another late one: the next with a
    value, however many buckets without one lie between (with one call in 64 kept, a slow
    host's group has no value in some buckets after its onset). Four late samples after the
    change, the first followed by two empty buckets, make a split of four."""
    row = np.array([0.0, 0.01, -0.01, 0.0, 0.01, 0.14, np.nan, np.nan, 0.08, 0.14, 0.15])
    res = change_point(row[None, :], np.array([0.03]), np.array([0.03]), 4)
    assert res.start[0] == 5 and res.count[0] == 4 and res.frac[0] == 1.0
    # a lone late sample whose next valid one is on time starts nothing
    row[8:] = 0.0
    assert change_point(row[None, :], np.array([0.03]), np.array([0.03]), 2).start[0] == -1
