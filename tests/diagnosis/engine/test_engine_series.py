"""The change-point scan behind every slow detector (diagnosis/engine/series.py)."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.series import binom_logsf, change_point


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
