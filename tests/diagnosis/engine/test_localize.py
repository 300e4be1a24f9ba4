"""Localizing slow connections: which count as healthy since a slowdown's onset (and so clear
what they cross), and the shortcuts taken for a large fleet of them."""

from __future__ import annotations

import itertools

import numpy as np

from diagnosis.engine import localize
from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.localize import split_at_onset
from diagnosis.engine.placement import Placement
from diagnosis.engine.series import ChangePoint, SeriesBank
from tests.diagnosis.engine.test_engine_slow_paths import diagnose

N = 30
THR, REC_THR = 0.05, 0.15


def split(rows: list[np.ndarray], slow: list[bool], start: list[int]):
    ring = np.array(rows)
    rt = np.tile(np.arange(N, dtype=np.int64) * 1_000_000_000, (len(rows), 1))
    n = len(rows)
    res = ChangePoint(np.array(start), *(np.zeros(n) for _ in range(7)))
    return split_at_onset(ring, rt, THR, res, np.array(slow), np.full(n, REC_THR))


def test_a_connection_slow_on_one_iteration_in_three_is_not_healthy():
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.01, (4, N))
    faulty = noise[0] + np.where(np.arange(N) >= 10, 1.5, 0.0)
    now_and_then = noise[1] + np.where((np.arange(N) >= 10) & (np.arange(N) % 3 == 0), 1.5, 0)
    # two samples just over the noise threshold, far below a recurring episode's
    grazing = noise[2] + np.where(np.isin(np.arange(N), (14, 20)), 0.07, 0.0)
    onset, healthy = split([faulty, now_and_then, grazing, noise[3]],
                           [True, False, False, False], [10, -1, -1, -1])
    assert onset[0] == 10_000_000_000
    assert (onset[1:] == np.iinfo(np.int64).max).all()
    assert healthy.tolist() == [False, False, True, True]


def test_samples_before_the_onset_do_not_count():
    # slow only long before the onset: healthy since
    early = np.where(np.arange(N) < 5, 1.5, 0.0)
    late = np.where(np.arange(N) >= 20, 1.5, 0.0)
    _, healthy = split([late, early], [True, False], [20, -1])
    assert healthy.tolist() == [False, True]


def test_past_the_pool_only_the_suspect_series_are_read_in_order(tmp_path, monkeypatch):
    """A job with more connections than ``_POOL`` takes the fleet's rates over an even spread
    of them and reads in time order only those that could be slow: the verdict is the same."""
    whole = slow_uplink(tmp_path / "all")
    read: list[int] = []
    judging = [False]
    ordered, judge = SeriesBank.ordered, localize.Localizer._comm_slow_conns

    def counting(self, keys):
        if judging[0]:
            read.append(len(keys))
        return ordered(self, keys)

    def judged(self, *args):
        judging[0] = True
        try:
            return judge(self, *args)
        finally:
            judging[0] = False
    monkeypatch.setattr(localize, "_POOL", 3)
    monkeypatch.setattr(SeriesBank, "ordered", counting)
    monkeypatch.setattr(localize.Localizer, "_comm_slow_conns", judged)
    assert slow_uplink(tmp_path / "pool") == whole
    assert read and max(read) <= 3      # of the six connections


def slow_series(x: np.ndarray) -> localize.SlowSeries:
    """``Localizer._slow_series`` of a fleet whose excess samples are ``x`` (keys, samples),
    one a second, with baselines of 1."""
    cfg = EngineConfig()
    n, K = x.shape
    bank = SeriesBank(K, 0, 1)
    keys = np.arange(n)
    bank.add(keys, np.ones(n), np.zeros(n, dtype=np.int64))      # the baselines: 1
    for j in range(K):
        bank.add(keys, 1.0 + x[:, j], np.full(n, (j + 1) * 10**9, dtype=np.int64))
    loc = localize.Localizer(Arena(cfg.window), Placement(), None, cfg)
    return loc._slow_series(bank, keys, 10**10, cfg.comm_min_before)


def test_past_the_pool_a_series_is_read_only_when_it_could_be_found_slow(monkeypatch):
    """Of a fleet past ``_POOL``, two samples above the noise in a full ring are chance (and
    common, with 64 samples a ring): a change point is judged slow on three at least
    (``comm_min_samples`` long, ``comm_min_frac`` of it above). Two samples far above, what
    recurring and slow in part count, are read."""
    monkeypatch.setattr(localize, "_POOL", 16)
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 0.01, (64, 64))
    x[1, [10, 40]] = 0.08        # two just above the noise threshold: chance
    x[2, [10, 40, 50]] = 0.08    # three: could be a change point
    x[3, [10, 40]] = 0.5         # two far above: could be recurring, or slow in part
    ss = slow_series(x)
    assert ss.thr < 0.08 and ss.rec_thr == EngineConfig().comm_rec_min_excess
    assert set(ss.rows.tolist()) == {2, 3}


def test_the_index_of_what_connections_cross_is_built_a_share_at_a_time(tmp_path,
                                                                         monkeypatch):
    """Each judgement indexes a share of the new connections; the rest when one is slow."""
    whole = slow_uplink(tmp_path / "all")
    pending: list[tuple[int | None, int]] = []
    sync = localize.Localizer._sync

    def counting(self, win, most=None, seconds=None):
        pending.append((most, len(win.changed)))
        return sync(self, win, most, seconds)
    monkeypatch.setattr(localize, "_SYNC_PER_PASS", 2)
    monkeypatch.setattr(localize.Localizer, "_sync", counting)
    assert slow_uplink(tmp_path / "share") == whole
    shares = [n for most, n in pending if most == 2]
    # (a connection is listed when new and when its path is set) two at each judgement
    assert len(shares) >= 3 and shares[0] >= 6
    assert [a - b for a, b in itertools.pairwise(shares[:3])] == [2, 2]


def slow_uplink(tmp_path) -> list[tuple[str, list[tuple[str, str]]]]:
    """What is named of ``test_engine_slow_paths``' uplink of leaf00r0 to spine00 slow from
    iteration 20 on (one flow crosses it)."""
    tmp_path.mkdir()
    reports = diagnose(tmp_path, {1: "spine00", 3: "spine00", 5: "spine01"},
                       "leaf00r0~spine00")
    named = [(r.kind, [(s.type, s.id) for s in r.suspects[:2]]) for r in reports]
    assert named and named[0][0] == "comm_slow"
    return named


def test_a_share_of_the_index_stops_when_its_time_is_up():
    from diagnosis.engine.arena import Arena
    from diagnosis.engine.config import EngineConfig
    from diagnosis.engine.conns import ConnWindow
    from diagnosis.engine.placement import Placement

    cfg = EngineConfig()
    arena = Arena(cfg.window)
    loc = localize.Localizer(arena, Placement(), None, cfg)
    win = ConnWindow(arena, cfg)
    n = 4000
    win.keys_of(np.arange(n), np.arange(n) + 1, np.zeros(n, dtype=np.int64))
    assert len(win.changed) == n
    loc._sync(win, None, 0.0)           # out of time: stops at its first look at the clock
    assert len(win.changed) == n - 1024
    loc._sync(win, 2000, 60.0)          # time enough: the share
    assert len(win.changed) == n - 1024 - 2000
    loc._sync(win)
    assert not win.changed
    rank = localize.Component("rank", "3999")
    assert loc._index[rank] == {3998, 3999}, "every key indexed once, whatever the shares"


def test_a_connection_slowed_by_a_seventh_all_along_is_not_slow_again_and_again():
    """A leaf 14.6% slower from sample 20 on (bench.accuracy.run's three-tier
    slow_switch-512-3 at one call in 64): its connections' samples lie at 0.12-0.17, on both
    sides of the recurrence threshold (0.15) but all above the change point's. That is a new
    level, not episodes: described as slow all along, so the component need not be slow at
    every episode together (``_recurs_together``). A connection slow in one sample of two,
    normal between, still recurs."""
    rng = np.random.default_rng(2)
    x = rng.normal(0.0, 0.01, (40, 64))
    x[0, 20:] = rng.uniform(0.12, 0.17, 44)
    x[1, 20::2] = 0.6
    ss = slow_series(x)
    slow, duty = ss.full(ss.slow, False), ss.full(ss.duty, np.nan)
    assert slow[0] and np.isnan(duty[0])
    assert slow[1] and 0.3 < duty[1] < 0.7
