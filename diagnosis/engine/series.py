"""Vectorized tests on many short series at once: onset by change point, robust noise, and a
bank of keyed series that learns each key's own baseline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

MAD_SIGMA = 1.4826


def row_quantile(a: np.ndarray, q: float) -> np.ndarray:
    """Quantile of each row ignoring NaN (NaN for an empty row), linear interpolation; one sort
    instead of numpy's per-row loop for NaN-aware quantiles."""
    s = np.sort(a, axis=1)                  # NaN sort last
    n = (~np.isnan(a)).sum(axis=1)
    pos = q * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    rows = np.arange(len(a))
    frac = pos - lo
    out = s[rows, lo] * (1 - frac) + s[rows, hi] * frac
    return np.where(n > 0, out, np.nan)


def binom_logsf(k: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    """log P(X >= k) for X ~ Binomial(n, p), elementwise, for small n (a log-sum-exp over the
    tail terms)."""
    from math import lgamma

    k, n, p = (np.asarray(x) for x in (k, n, p))
    top = int(n.max()) if n.size else 0
    lg = np.array([lgamma(i + 1.0) for i in range(top + 2)])
    j = np.arange(top + 1)[None, :]
    kk, nn, pp = k[:, None], n[:, None], np.clip(p, 1e-12, 1 - 1e-12)[:, None]
    term = (lg[nn] - lg[j] - lg[np.maximum(nn - j, 0)] + j * np.log(pp)
            + (nn - j) * np.log1p(-pp))
    term = np.where((j >= kk) & (j <= nn), term, -np.inf)
    m = term.max(axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return m + np.log(np.exp(term - m[:, None]).sum(axis=1))


def even_spread(keys: np.ndarray, most: int) -> np.ndarray:
    """``keys``, or ``most`` of them evenly spread over it when there are more: the fleet's
    rates and noise, read over a few hundred thousand series, are those of them all."""
    n = len(keys)
    if n <= most:
        return keys
    return keys[np.unique(np.linspace(0, n - 1, most).astype(np.int64))]


def robust_sigma(values: np.ndarray, axis: tuple[int, ...] | int | None = None) -> np.ndarray:
    """1.4826 x median absolute deviation, ignoring NaN; ``axis`` None or the trailing axes."""
    if axis is None:
        v = values[np.isfinite(values)]
        if not len(v):
            return np.float64(np.nan)
        med = np.median(v)                       # partition, not sort
        return np.float64(MAD_SIGMA * np.median(np.abs(v - med)))
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        lead = values.shape[: values.ndim - len(axes)]
        flat = values.reshape(int(np.prod(lead)) if lead else 1, -1)
    med = row_quantile(flat, 0.5)
    mad = row_quantile(np.abs(flat - med[:, None]), 0.5)
    return (MAD_SIGMA * mad).reshape(lead)


def excess_sigma(excess: np.ndarray, least: int = 20) -> float:
    """The noise of excess samples (each relative to its key's baseline: 0 is normal), robust to
    slow samples however many: ``robust_sigma`` of the pooled samples, or, when smaller, the
    spread of those below their baseline (1.4826 x their median distance from it, at least
    ``least`` of them). A fault can only add slow samples, and one that slows every key at
    once (the one switch of a small fabric, every third iteration) can make half the pool
    slow, where the median absolute deviation breaks down and calls the fault itself noise;
    the samples below the baseline are noise alone. (The pooled estimate stays the bound: a
    baseline learnt slow, on warm-up, would widen the lower side instead.) NaN: none."""
    v = excess[np.isfinite(excess)]
    if not len(v):
        return float("nan")
    pooled = float(robust_sigma(v))
    low = -v[v < 0]
    if len(low) < least:
        return pooled
    return min(pooled, MAD_SIGMA * float(np.median(low)))


#: keys read at once where every key's ring is scanned
_BLOCK = 1 << 16


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
        # per key: since when (sample time) it has been judged slow, -1 if not (kept by the
        # detector across passes: a ring holds a fixed number of samples, and a fault's onset
        # may have left it)
        self.slow_since = np.zeros(0, dtype=np.int64)
        # the rings of keys 0..n-1 oldest first, as of ``_version`` (bumped by every change of
        # the rings): the detectors of one pass read them several times, for several key sets
        self._version = 0
        self._in_order: tuple[int, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.count)

    def ensure(self, size: int) -> None:
        cap = len(self.count)
        if size <= cap:
            return
        new = max(size, 2 * cap, 64)
        grow = new - cap
        self._version += 1
        self.count = np.r_[self.count, np.zeros(grow, dtype=np.int64)]
        self.base = np.r_[self.base, np.full(grow, np.nan)]
        self.learn_buf = np.vstack([self.learn_buf, np.full((grow, self.learn), np.nan)])
        self.ring = np.vstack([self.ring, np.full((grow, self.K), np.nan)])
        self.ring_t = np.vstack([self.ring_t, np.zeros((grow, self.K), dtype=np.int64)])
        self.pos = np.r_[self.pos, np.zeros(grow, dtype=np.int64)]
        self.slow_since = np.r_[self.slow_since, np.full(grow, -1, dtype=np.int64)]

    def add(self, key: np.ndarray, value: np.ndarray, t: np.ndarray) -> None:
        if len(key) == 0:
            return
        self._version += 1
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

    def counts(self, keys: np.ndarray, thr: float, since: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Per key: its samples (at ``since`` or later, when given) and how many of them are
        above ``thr``, whatever their order; read a block of keys at a time (at a million
        keys a copy of the rings is gigabytes)."""
        keys = np.asarray(keys, dtype=np.int64)
        n_all = np.zeros(len(keys), dtype=np.int64)
        n_above = np.zeros(len(keys), dtype=np.int64)
        for lo in range(0, len(keys), _BLOCK):
            k = keys[lo: lo + _BLOCK]
            block = slice(int(k[0]), int(k[-1]) + 1)
            contiguous = block.stop - block.start == len(k) and bool((np.diff(k) == 1).all())
            ring = self.ring[block] if contiguous else self.ring[k]
            ok = np.isfinite(ring)
            if since is not None:
                ok &= (self.ring_t[block] if contiguous else self.ring_t[k]) >= since
            n_all[lo: lo + len(k)] = ok.sum(axis=1)
            n_above[lo: lo + len(k)] = (ok & (ring > thr)).sum(axis=1)
        return n_all, n_above

    def newest(self, keys: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The newest ``m`` samples of ``keys``' rings, oldest first, and their times (as
        ``ordered``, its last ``m`` columns, without reading the rest)."""
        keys = np.asarray(keys, dtype=np.int64)
        m = min(int(m), self.K)
        idx = (self.pos[keys][:, None] + np.arange(self.K - m, self.K)[None, :]) % self.K
        idx += (keys * self.K)[:, None]
        return np.take(self.ring, idx), np.take(self.ring_t, idx)

    def ordered(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rings of ``keys`` oldest first (NaN where empty) and their times (arrays of the
        caller's own)."""
        keys = np.asarray(keys, dtype=np.int64)
        hit = self._in_order
        if hit is not None and hit[0] == self._version and len(keys) \
                and int(keys.min()) >= 0 and int(keys.max()) < len(hit[1]):
            return hit[1][keys], hit[2][keys]
        # one gather from the flat rings (indexing the rows first, then taking along them,
        # copies every row twice)
        idx = (self.pos[keys][:, None] + np.arange(self.K)[None, :]) % self.K
        idx += (keys * self.K)[:, None]
        ring, ring_t = np.take(self.ring, idx), np.take(self.ring_t, idx)
        if len(keys) and int(keys[0]) == 0 and int(keys[-1]) == len(keys) - 1 \
                and bool((np.diff(keys) == 1).all()):
            # every key from the first: kept for the other reads of this pass
            self._in_order = (self._version, ring, ring_t)
            return ring.copy(), ring_t.copy()
        return ring, ring_t


@dataclass
class ChangePoint:
    start: np.ndarray     # first sample of the late segment, -1 when none
    logp: np.ndarray      # log P(at least this many late samples | base rate), best split
    count: np.ndarray     # samples in the segment
    frac: np.ndarray      # fraction of them late
    median: np.ndarray    # median of the late samples of the segment
    effect: np.ndarray    # upper quartile after the split minus upper quartile before it
    pre_frac: np.ndarray  # fraction of late samples before the split (0 without enough)
    pre_count: np.ndarray


def _next_valid(flag: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per row and column, ``flag`` at the first valid column at or after it (False where none
    is left)."""
    rows, K = flag.shape
    col = np.where(valid, np.arange(K)[None, :], K)
    # (the least valid column from each one on, scanning from the right)
    first = np.minimum.accumulate(col[:, ::-1], axis=1)[:, ::-1]
    padded = np.concatenate([flag, np.zeros((rows, 1), dtype=bool)], axis=1)
    return np.take_along_axis(padded, first, axis=1)


def change_point(a: np.ndarray, thr: np.ndarray, p0: np.ndarray,
                 min_samples: int) -> ChangePoint:
    """Per row of ``a`` (oldest first, NaN = none): the split after which late samples
    (``> thr``) are least likely under the base rate ``p0`` (a binomial tail), with the segment
    starting on a late sample followed by another, and at least ``min_samples`` long."""
    rows, K = a.shape
    valid = ~np.isnan(a)
    high = a > thr[:, None]                   # (NaN compares False)
    above = np.cumsum(high[:, ::-1], axis=1)[:, ::-1]
    length = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]
    # the next valid sample after each one is late too (no onset on a lone outlier); buckets
    # without a value between them do not part them
    nxt = np.zeros_like(high)
    nxt[:, :-1] = _next_valid(high, valid)[:, 1:]
    cand = high & nxt & (length >= min_samples)
    logp = np.full((rows, K), 0.0)
    if cand.any():
        r, c = np.nonzero(cand)
        logp[r, c] = binom_logsf(above[r, c], length[r, c], p0[r])
    has = cand.any(axis=1)
    start = np.where(has, np.argmin(np.where(cand, logp, 1.0), axis=1), -1)
    ix = np.arange(rows)
    # among splits nearly as significant as the best, the purest (an early noise sample must
    # not pull the onset before the fault)
    best0 = logp[ix, np.maximum(start, 0)]
    near = cand & (logp <= 0.8 * best0[:, None])
    purity = np.where(near, above / np.maximum(length, 1), -1.0)
    start = np.where(has, np.argmax(purity, axis=1), -1)
    s0 = np.maximum(start, 0)
    # the test is the scan's: its most significant split, whichever split then gives the onset
    best = np.where(has, best0, 0.0)
    cnt = np.where(has, length[ix, s0], 0)
    frac = np.where(has, above[ix, s0] / np.maximum(cnt, 1), 0.0)
    # quantiles only for the rows that have a change point at all (few, in a healthy job)
    med = np.full(rows, np.nan)
    effect = np.full(rows, np.nan)
    pre_frac = np.zeros(rows)
    pre_n = np.zeros(rows, dtype=np.int64)
    h = np.flatnonzero(has)
    if len(h):
        ah, st, hv, vh = a[h], start[h], high[h], valid[h]
        col = np.arange(K)[None, :]
        after = col >= st[:, None]
        med[h] = row_quantile(np.where(after & hv, ah, np.nan), 0.5)
        q_post = row_quantile(np.where(after, ah, np.nan), 0.75)
        before = ~after & vh
        pre_n[h] = before.sum(axis=1)
        q_pre = row_quantile(np.where(before, ah, np.nan), 0.75)
        enough = pre_n[h] >= min_samples
        effect[h] = np.where(enough, q_post - np.nan_to_num(q_pre, nan=0.0), q_post)
        pre_frac[h] = np.where(enough, (hv & before).sum(axis=1) / np.maximum(pre_n[h], 1),
                               0.0)
    return ChangePoint(start, best, cnt, frac, med, effect, pre_frac, pre_n)


@dataclass
class Recurrence:
    start: np.ndarray      # first sample of the recurring segment (an episode's start), -1 none
    logp: np.ndarray       # log P(at least this many episodes | base rate), best start
    hits: np.ndarray       # slow samples from the start on (see ``recurrence``)
    count: np.ndarray      # samples from the start on
    episodes: np.ndarray   # runs of consecutive slow samples from the start on
    median: np.ndarray     # median of the slow samples from the start on (NaN when none)


#: (valid, slow, begins) per sample: see :func:`episode_marks`
Marks = tuple[np.ndarray, np.ndarray, np.ndarray]


def episode_marks(a: np.ndarray, thr: np.ndarray) -> Marks:
    """(valid, slow, begins): per sample, whether it is one, above ``thr``, and the first
    slow sample of a run of consecutive slow ones (NaN samples neither break nor extend a
    run)."""
    rows, K = a.shape
    valid = ~np.isnan(a)
    high = a > thr[:, None]                   # (NaN compares False)
    # the previous sample's mark: the one before it in the row, unless NaN samples lie between
    # valid ones (a ring not yet full has its NaN first: nothing valid comes before them)
    prev_high = np.zeros((rows, K), dtype=bool)
    prev_high[:, 1:] = high[:, :-1]
    gaps = np.flatnonzero((valid[:, :-1] & ~valid[:, 1:]).any(axis=1))
    if len(gaps):
        v = valid[gaps]
        last_valid = np.maximum.accumulate(np.where(v, np.arange(K)[None, :], -1), axis=1)
        prev = np.full((len(gaps), K), -1, dtype=np.int64)
        prev[:, 1:] = last_valid[:, :-1]
        prev_high[gaps] = (prev >= 0) & high[gaps[:, None], np.maximum(prev, 0)]
    return valid, high, high & ~prev_high


def strong_runs(a: np.ndarray, high: np.ndarray, begins: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, the episode it belongs to (a running count per row, 0 before the first),
    and per row and episode (indexed by that count) how many of its samples are at least half
    as slow as the row's median slow sample (see :func:`strong_counts`)."""
    return np.cumsum(begins, axis=1), strong_counts(a, high, begins)


def strong_counts(a: np.ndarray, high: np.ndarray, begins: np.ndarray) -> np.ndarray:
    """Per row and episode (indexed by its running count, 0 before the first), how many of
    its samples are at least half as slow as the row's median slow sample (an episode's edge,
    a sample whose span only grazes it, does not count)."""
    rows, K = a.shape
    n = np.zeros((rows, K + 1))
    # only rows with a slow sample have strong ones (most rows, in a healthy job, have none)
    some = np.flatnonzero(high.any(axis=1))
    if not len(some):
        return n
    ah, hh = a[some], high[some]
    ep = np.cumsum(begins[some], axis=1)
    typical = row_quantile(np.where(hh, ah, np.nan), 0.5)
    strong = hh & (ah >= 0.5 * np.nan_to_num(typical)[:, None])     # (NaN compares False)
    r, c = np.nonzero(strong)
    np.add.at(n, (some[r], ep[r, c]), 1.0)
    return n


def episode_length(a: np.ndarray, thr: np.ndarray, default: float = 2.0,
                   least: int = 20, marks: Marks | None = None) -> float:
    """How long the episodes of rows slow once only last: the 90th percentile of their strong
    samples (see :func:`strong_runs`); ``default`` with fewer than ``least`` such episodes. A
    transient congestion of two iterations, or a pause and its echo in the next sample, is
    one event of that length. A row that came back, however few times, is left out: a
    fault's first episode (four slow iterations of a switch, over every connection through
    it) would otherwise set the length its next episodes are weighed by, once they begin.
    ``marks``: ``episode_marks(a, thr)`` when already made."""
    _, high, begins = episode_marks(a, thr) if marks is None else marks
    quiet = begins.sum(axis=1) == 1
    if not quiet.any():
        return default
    n = strong_counts(a[quiet], high[quiet], begins[quiet])
    lengths = n[:, 1:][n[:, 1:] > 0]
    if len(lengths) < least:
        return default
    return float(max(np.percentile(lengths, 90), 1.0))


def _first_strong(begins: np.ndarray, strong: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row, where its recurrence began: the first episode from ``start`` on with a strong
    sample, or a weak one before it in the episodes' rhythm (at most twice their usual spacing
    from the next). The binomial tail may take in an episode of noise just above the threshold
    (a sample of the first iterations) well before the first slow one, and the onset with it;
    a fault's first episode may be weak too (its sample only grazes the slow iteration)."""
    ep = np.cumsum(begins, axis=1)
    first = ep[np.arange(len(ep)), np.argmax(strong, axis=1)]
    moved = np.where(strong.any(axis=1),
                     np.argmax(begins & (ep == first[:, None]), axis=1), start)
    out = moved.copy()
    for i in np.flatnonzero(moved > start).tolist():    # (few rows: a weak episode first)
        at = np.flatnonzero(begins[i])
        spacing = np.diff(at[at >= moved[i]])
        most = 2 * float(np.median(spacing)) if len(spacing) else 0.0
        for b in at[(at >= start[i]) & (at < moved[i])][::-1].tolist():
            if out[i] - b > most:
                break
            out[i] = b
    return out


def recurrence(a: np.ndarray, thr: np.ndarray, p0: np.ndarray,
               min_episodes: int, unit: float = 0.0) -> Recurrence:
    """Per row of ``a`` (oldest first, NaN = none): slowness that comes back. An episode is a
    run of consecutive samples above ``thr`` (NaN samples neither break nor extend it); from the
    start of some episode on, the row has ``episodes`` of them, at least ``min_episodes`` (with
    ``unit``: weighing that many, in two episodes at least), with healthy samples between. Of
    those starts, the one whose episodes are least likely under the
    base rate ``p0`` of an episode starting at a sample (a binomial tail; see
    :func:`episode_rate`): a component slow now and then in a pattern or at random, which a
    change point into a persistently slow segment misses (a third of the samples after it are
    slow, none before). Episodes, not slow samples, are the independent events: a congestion
    that lasts two iterations, or strikes every microbatch of one, is one. With ``unit`` (the
    length of a benign episode, :func:`episode_length`), an episode of several times that
    length weighs as many: slow for five iterations in a row is more than one congestion.
    The start told (and the samples and episodes counted from it) is that one's first strong
    episode (``_first_strong``); the p-value stays the tail's."""
    rows, K = a.shape
    valid, high, begins = episode_marks(a, thr)
    col = np.arange(K)[None, :]
    length = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]
    eps = np.cumsum(begins[:, ::-1], axis=1)[:, ::-1]
    weight = begins.astype(np.float64)
    if unit > 0 and begins.any():
        ep, n = strong_runs(a, high, begins)
        r, c = np.nonzero(begins)
        weight[r, c] = np.maximum(1.0, np.floor(n[r, ep[r, c]] / unit))
    events = np.rint(np.cumsum(weight[:, ::-1], axis=1)[:, ::-1]).astype(np.int64)
    # it came back at least once, and weighs as many episodes as asked
    cand = begins & (eps >= recurrence_least(min_episodes)) \
        & (events >= max(int(min_episodes), 1))
    logp = np.zeros((rows, K))
    if cand.any():
        r, c = np.nonzero(cand)
        logp[r, c] = binom_logsf(np.minimum(events[r, c], length[r, c]), length[r, c], p0[r])
    has = cand.any(axis=1)
    start = np.where(has, np.argmin(np.where(cand, logp, 1.0), axis=1), -1)
    s0 = np.maximum(start, 0)
    rix = np.arange(rows)
    best = np.where(has, logp[rix, s0], 0.0)
    med = np.full(rows, np.nan)
    hits = np.zeros(rows, dtype=np.int64)
    h = np.flatnonzero(has)
    if len(h):
        # how often and how much: the samples at least half as slow as the episodes' median
        # (an episode's edge, where a sample's span only grazes it, is a slow sample of the
        # episode but not a slow round of its own)
        after = (col >= start[h, None]) & high[h]
        typical = row_quantile(np.where(after, a[h], np.nan), 0.5)
        strong = after & (a[h] >= 0.5 * typical[:, None])     # (NaN compares False)
        med[h] = row_quantile(np.where(strong, a[h], np.nan), 0.5)
        hits[h] = strong.sum(axis=1)
        start[h] = _first_strong(begins[h], strong, start[h])
        s0 = np.maximum(start, 0)
    return Recurrence(start, best, hits, np.where(has, length[rix, s0], 0),
                      np.where(has, eps[rix, s0], 0), med)


def episode_rate(a: np.ndarray, thr: np.ndarray, floor: float, trim: float = 0.1,
                 common: np.ndarray | None = None, marks: Marks | None = None) -> float:
    """How often an episode of samples above ``thr`` (per row) starts, per sample, over the
    rows of ``a`` (NaN = none), leaving out the ``trim`` fraction of rows with the highest
    rates (the faulty ones, which would otherwise raise the rate they are judged against in a
    small job), floored at ``floor``. ``common`` marks samples taken while most rows were slow
    at once: episodes starting there are no independent noise (a fault of what every row
    crosses, or an event of the whole job) and are not counted. ``marks``:
    ``episode_marks(a, thr)`` when already made."""
    valid, _, begins = episode_marks(a, thr) if marks is None else marks
    if common is not None:
        begins = begins & ~common
    n = valid.sum(axis=1)
    rows = n > 0
    if not rows.any():
        return float(min(max(floor, 0.0), 0.5))
    rate = begins.sum(axis=1)[rows] / n[rows]
    keep = np.sort(rate)[: max(1, int(np.ceil((1 - trim) * len(rate))))]
    return float(min(max(float(keep.mean()), floor), 0.5))


_Rows = TypeVar("_Rows", ChangePoint, Recurrence)


def on_slow_rows(fn: Callable[..., _Rows], least: int, a: np.ndarray, thr: np.ndarray,
                 p0: np.ndarray, *args: Any) -> _Rows:
    """``fn(a, thr, p0, *args)`` (:func:`change_point` or :func:`recurrence`) computed only on
    the rows with ``least`` samples above ``thr``, the fewest ``fn`` needs to find anything
    (:data:`CHANGE_LEAST`, :func:`recurrence_least`); the other rows get what ``fn`` gives a
    row without any (at 4,096 GPUs most of ~100k connections are healthy)."""
    n = len(a)
    keep = np.flatnonzero((a > thr[:, None]).sum(axis=1) >= least)     # (NaN compares False)
    if len(keep) == n:
        return fn(a, thr, p0, *args)
    none = fn(np.full((1, a.shape[1]), np.nan), thr[:1], p0[:1], *args)
    part = fn(a[keep], thr[keep], p0[keep], *args)
    out = {}
    for f in fields(none):
        col = np.full(n, getattr(none, f.name)[0], dtype=getattr(part, f.name).dtype)
        col[keep] = getattr(part, f.name)
        out[f.name] = col
    return type(none)(**out)


#: a change point starts on a late sample followed by another
CHANGE_LEAST = 2


def recurrence_least(min_episodes: int) -> int:
    """The fewest late samples :func:`recurrence` finds anything in: one per episode, of the
    episodes it asks for at least."""
    return min(2, max(int(min_episodes), 1))
