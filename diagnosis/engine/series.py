"""Vectorized tests on many short series at once: onset by change point, robust noise, and a
bank of keyed series that learns each key's own baseline."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAD_SIGMA = 1.4826


def robust_sigma(values: np.ndarray, axis: tuple[int, ...] | int | None = None) -> np.ndarray:
    """1.4826 x median absolute deviation, ignoring NaN."""
    med = np.nanmedian(values, axis=axis, keepdims=True)
    return MAD_SIGMA * np.nanmedian(np.abs(values - med), axis=axis)


@dataclass
class Onset:
    start: np.ndarray     # index of the first sample of the slow segment, -1 when none
    median: np.ndarray    # median of the segment (NaN when none)
    count: np.ndarray     # samples in the segment
    frac: np.ndarray      # fraction of the segment above the threshold


def onset_test(a: np.ndarray, thr: np.ndarray, min_samples: int,
               consistency: float) -> Onset:
    """For each row of ``a`` (oldest sample first, NaN = none), the earliest sample from which on
    at least ``consistency`` of the samples exceed ``thr`` (per row), over at least
    ``min_samples`` samples: a change point into a persistently high segment."""
    valid = ~np.isnan(a)
    high = valid & (np.nan_to_num(a, nan=-np.inf) > thr[:, None])
    above = np.cumsum(high[:, ::-1], axis=1)[:, ::-1]
    length = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]
    cond = (length >= min_samples) & (above >= consistency * length) & high
    has = cond.any(axis=1)
    start = np.where(has, np.argmax(cond, axis=1), -1)
    col = np.arange(a.shape[1])[None, :]
    seg = np.where((col >= start[:, None]) & has[:, None], a, np.nan)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(seg, axis=1)
    rows = np.arange(len(a))
    cnt = np.where(has, length[rows, np.maximum(start, 0)], 0)
    frac = np.where(has, above[rows, np.maximum(start, 0)] / np.maximum(cnt, 1), 0.0)
    return Onset(start, med, cnt, frac)


class SeriesBank:
    """Per key: a baseline learnt from its own first samples (after ``skip``), then a ring of
    ``value / baseline - 1`` (the excess) with the sample times."""

    def __init__(self, history: int, skip: int, learn: int) -> None:
        self.K, self.skip, self.learn = history, skip, learn
        self.count = np.zeros(0, dtype=np.int64)
        self.base = np.zeros(0)
        self.learn_buf = np.zeros((0, learn))
        self.ring = np.zeros((0, history))
        self.ring_t = np.zeros((0, history), dtype=np.int64)
        self.pos = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.count)

    def ensure(self, size: int) -> None:
        cap = len(self.count)
        if size <= cap:
            return
        new = max(size, 2 * cap, 64)
        grow = new - cap
        self.count = np.r_[self.count, np.zeros(grow, dtype=np.int64)]
        self.base = np.r_[self.base, np.full(grow, np.nan)]
        self.learn_buf = np.vstack([self.learn_buf, np.full((grow, self.learn), np.nan)])
        self.ring = np.vstack([self.ring, np.full((grow, self.K), np.nan)])
        self.ring_t = np.vstack([self.ring_t, np.zeros((grow, self.K), dtype=np.int64)])
        self.pos = np.r_[self.pos, np.zeros(grow, dtype=np.int64)]

    def add(self, key: np.ndarray, value: np.ndarray, t: np.ndarray) -> None:
        if len(key) == 0:
            return
        self.ensure(int(key.max()) + 1)
        o = np.lexsort((t, key))
        key, value, t = key[o], value[o], t[o]
        start = np.ones(len(key), dtype=bool)
        start[1:] = key[1:] != key[:-1]
        first = np.flatnonzero(start)
        occ = np.arange(len(key)) - np.repeat(first, np.diff(np.r_[first, len(key)]))
        num = self.count[key] + occ          # sample number of each value for its key
        np.add.at(self.count, key, 1)
        lrn = (num >= self.skip) & (num < self.skip + self.learn)
        self.learn_buf[key[lrn], num[lrn] - self.skip] = value[lrn]
        ready = np.unique(key[lrn & (num == self.skip + self.learn - 1)])
        if len(ready):
            self.base[ready] = np.median(self.learn_buf[ready], axis=1)
        judged = (num >= self.skip + self.learn) & ~np.isnan(self.base[key])
        if judged.any():
            k, v, tt = key[judged], value[judged], t[judged]
            j = num[judged] - self.skip - self.learn
            col = j % self.K
            self.ring[k, col] = v / np.maximum(self.base[k], 1e-12) - 1.0
            self.ring_t[k, col] = tt
            self.pos[k] = np.maximum(self.pos[k], 0)
            np.maximum.at(self.pos, k, j + 1)

    def ordered(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rings of ``keys`` oldest first (NaN where empty) and their times."""
        idx = (self.pos[keys][:, None] + np.arange(self.K)[None, :]) % self.K
        return (np.take_along_axis(self.ring[keys], idx, axis=1),
                np.take_along_axis(self.ring_t[keys], idx, axis=1))
