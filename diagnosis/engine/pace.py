"""Communicators that compute slower: a slow host (or a slow GPU) stretches the time between the
calls of the communicators it is in, while its victims keep their pace between waits.

With sampled calls, lateness inside a call shows a slow GPU among its peers (``straggle``), but
a host whose every GPU is slow is late to nothing inside its own tensor-parallel group: its
members come together, only slower. What changes is that group's pace: the time per call between
two kept calls, over the calls between them. Its victims (the next pipeline stages, the other
replicas) wait now and then but compute as fast as before, so a low quantile of their pace (the
spans without a wait) does not move. Per time bucket, each group's low quantile is compared with
that of the groups of its size (which cancels the whole job's changes of pace: a checkpoint, the
iteration's jitter), and a group whose ratio rises from some bucket on is slow.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.series import change_point, robust_sigma

# the quantile of a bucket's per-call periods that stands for the group's compute pace: low, so
# that spans which include a wait (a bubble, the others' lateness) do not count
_Q = 0.2
_MIN_PERIODS = 4      # periods a group needs in a bucket to have a value there
# the share of a group's buckets after the change that must be slow: a quantile of a few
# periods is noisy, and a slow host's pace is behind in nearly every bucket
_MIN_FRAC = 0.6
# buckets a group needs before the change: groups differ by role (a pipeline stage with the
# loss, or the embedding, keeps another pace), so only a change against its own past counts
_MIN_BEFORE = 3
_LEARN = 64           # spacings of kept calls seen before the bucket length is chosen


@dataclass
class SlowGroup:
    group: int
    onset_ns: int
    excess: float         # median relative excess of its pace over its peers' after onset
    samples: int
    frac: float
    logp: float


class _Size:
    """The groups of one size: their series of bucket values, groups along the columns."""

    def __init__(self, K: int) -> None:
        self.K = K
        self.col: dict[int, int] = {}
        self.groups: list[int] = []
        self.x = np.zeros((K, 0))
        self.t = np.zeros(K, dtype=np.int64)
        self.pos = 0

    def column(self, g: int) -> int:
        c = self.col.get(g)
        if c is None:
            c = self.col[g] = len(self.groups)
            self.groups.append(g)
            self.x = np.hstack([self.x, np.full((self.K, 1), np.nan)])
        return c


class GroupPace:
    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.bucket_ns = config.straggle_bucket_ns
        self.last_first: dict[int, tuple[int, int]] = {}   # group -> (seq, first entry)
        # per bucket not yet written, each group's periods
        self._open: dict[int, dict[int, list[float]]] = {}
        self._newest = -1
        self._closed = -1
        self.span = 0             # bucket length, chosen from the first kept calls' spacing
        self._gaps: list[int] = []
        self._pending: list[tuple[int, int, float]] = []
        self.sizes: dict[int, _Size] = {}

    def update(self, fin: Finished) -> None:
        """Take finished kept collectives (per group in seq order; the groups of a batch may
        come one after the other, each over the batch's whole span of time)."""
        keep = ~self.arena.p2p[fin.group]
        if not keep.any():
            return
        first = fin.enter.min(axis=1)
        for g, s, t in zip(fin.group[keep].tolist(), fin.seq[keep].tolist(),
                           first[keep].tolist(), strict=True):
            prev = self.last_first.get(g)
            self.last_first[g] = (s, t)
            if prev is None or s <= prev[0] or t <= prev[1]:
                continue
            self._pending.append((g, t, (t - prev[1]) / (s - prev[0])))
            if not self.span:
                self._gaps.append(t - prev[1])
        if not self.span:
            if len(self._gaps) < _LEARN:
                return
            # a bucket long enough for about eight kept calls of a typical group
            unit = self.bucket_ns
            self.span = int(min(max(np.ceil(8 * np.median(self._gaps) / unit), 1), 16)) * unit
        for g, t, per in self._pending:
            b = t // self.span
            if b > self._closed:        # (else a bucket already written)
                self._open.setdefault(b, {}).setdefault(g, []).append(per)
                self._newest = max(self._newest, b)
        self._pending = []
        # a bucket is written once calls two buckets later arrive (the groups' rows of one
        # moment may come a bucket apart)
        for b in sorted(x for x in self._open if x < self._newest - 1):
            self._close(b, self._open.pop(b), self.span)
            self._closed = b

    def _close(self, bucket: int, periods: dict[int, list[float]], span: int) -> None:
        """Write a bucket: each group's low-quantile pace over its size's median."""
        by_size: dict[int, list[tuple[int, float]]] = {}
        for g, per in periods.items():
            if len(per) >= _MIN_PERIODS:
                by_size.setdefault(int(self.arena.n[g]), []).append(
                    (g, float(np.quantile(per, _Q))))
        for n, vals in by_size.items():
            if len(vals) < 3:
                continue        # nothing to compare with
            size = self.sizes.get(n)
            if size is None:
                size = self.sizes[n] = _Size(self.cfg.history)
            med = float(np.median([v for _, v in vals]))
            if med <= 0:
                continue
            row = size.pos % size.K
            cols = [size.column(g) for g, _ in vals]
            size.x[row, :] = np.nan
            size.x[row, cols] = [v / med - 1.0 for _, v in vals]
            size.t[row] = bucket * span
            size.pos += 1

    def judge(self) -> list[SlowGroup]:
        """Groups whose pace fell behind their peers' from some bucket on."""
        cfg = self.cfg
        out: list[SlowGroup] = []
        for size in self.sizes.values():
            if not size.groups or size.pos < cfg.slow_min_samples:
                continue
            order = (size.pos + np.arange(size.K)) % size.K
            x = size.x[order].T            # (groups, K), oldest first
            t = size.t[order]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                sigma = float(np.nan_to_num(robust_sigma(x), nan=0.0))
            thr = max(cfg.straggle_min_excess, cfg.slow_noise_k * sigma)
            high = x > thr
            valid = ~np.isnan(x)
            rate = float(np.median(high.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)))
            p0 = np.full(len(x), min(max(rate, cfg.slow_base_rate), 0.5))
            res = change_point(x, np.full(len(x), thr), p0, cfg.slow_min_samples)
            ok = (res.start >= 0) & (res.logp < np.log(cfg.slow_alpha_member)) \
                & (res.pre_count >= _MIN_BEFORE) \
                & (res.frac - res.pre_frac >= cfg.slow_min_frac) & (res.frac >= _MIN_FRAC) \
                & (res.median >= 2 * cfg.straggle_min_excess)
            for i in np.flatnonzero(ok).tolist():
                out.append(SlowGroup(size.groups[i], int(t[res.start[i]]),
                                     float(res.median[i]), int(res.count[i]),
                                     float(res.frac[i]), float(res.logp[i])))
        return out
