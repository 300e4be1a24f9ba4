"""Non-communication slowness: a rank (or every rank of a host) that brings its own delay.

Between a call of a communicator and its previous call with the same signature (operation and
size), each member's *own* time (time outside calls) is compared with its peers' over the same
span: members of one collective do the same work. Pairing by signature makes the span one
iteration when a step issues several calls on one communicator, so compute that precedes only one
of them lands in every sample. A member's sample is its excess own time, capped by how late it
actually arrived at some call of the span (extra compute that delays nobody is not a fault),
relative to the peers' median own time. A victim that waited for a slow peer elsewhere arrives
late but brings no own excess; a checkpoint step or warm-up that is slow on every member leaves
the median behind; a one-off pause is one sample. A rank is slow when, from some change point on,
most of its samples exceed the communicator's noise, and the segment's median is both large
enough to matter and many standard errors above the noise.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.series import change_point, robust_sigma, row_quantile

# calls of a communicator whose lateness is remembered: a signature recurring further apart
# than this gives no sample
_LATE = 64


@dataclass
class SlowRank:
    rank: int
    group: int
    onset_ns: int
    excess: float          # median relative excess after onset
    excess_ns: float       # median excess in ns after onset
    samples: int
    frac: float
    sigma: float
    logp: float            # log p-value of so many late samples by chance


class _SizeClass:
    def __init__(self, n: int, K: int) -> None:
        self.n, self.K = n, K
        self.local: dict[int, int] = {}
        self.groups: list[int] = []
        # the last call of each (communicator, signature) stream: own row and seq
        self.streams: dict[tuple[int, int], int] = {}
        self.last_own = np.zeros((0, n), dtype=np.int64)
        self.last_seq = np.zeros(0, dtype=np.int64)
        # each communicator's recent lateness rows (ns) and own-time rows, by seq % _LATE
        self.late = np.zeros((0, _LATE, n), dtype=np.float32)
        self.late_own = np.zeros((0, _LATE, n), dtype=np.int64)
        self.late_seq = np.zeros((0, _LATE), dtype=np.int64)
        self.x = np.zeros((0, K, n), dtype=np.float32)
        self.a = np.zeros((0, K, n), dtype=np.float32)
        self.scale = np.zeros((0, K))
        self.t = np.zeros((0, K), dtype=np.int64)
        self.pos = np.zeros(0, dtype=np.int64)
        self.span_end = np.zeros(0, dtype=np.int64)   # seq ending each group's last sample

    def index(self, groups: np.ndarray) -> np.ndarray:
        out = np.empty(len(groups), dtype=np.int64)
        for i, g in enumerate(groups.tolist()):
            li = self.local.get(g)
            if li is None:
                li = self.local[g] = len(self.groups)
                self.groups.append(g)
            out[i] = li
        grow = len(self.groups) - len(self.pos)
        if grow > 0:
            n, K = self.n, self.K
            self.late = np.concatenate([self.late, np.zeros((grow, _LATE, n), np.float32)])
            self.late_own = np.concatenate([self.late_own,
                                            np.full((grow, _LATE, n), -1, np.int64)])
            self.late_seq = np.vstack([self.late_seq, np.full((grow, _LATE), -1, np.int64)])
            self.x = np.concatenate([self.x, np.full((grow, K, n), np.nan, np.float32)])
            self.a = np.concatenate([self.a, np.full((grow, K, n), np.nan, np.float32)])
            self.scale = np.vstack([self.scale, np.full((grow, K), np.nan)])
            self.t = np.vstack([self.t, np.zeros((grow, K), dtype=np.int64)])
            self.pos = np.r_[self.pos, np.zeros(grow, dtype=np.int64)]
            self.span_end = np.r_[self.span_end, np.full(grow, -1, dtype=np.int64)]
        return out

    def stream_ids(self, li: np.ndarray, sig: np.ndarray) -> np.ndarray:
        key = np.stack([li, sig], axis=1)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        for i, (a, b) in enumerate(uniq.tolist()):
            sid = self.streams.get((a, b))
            if sid is None:
                sid = self.streams[(a, b)] = len(self.streams)
            ids[i] = sid
        grow = len(self.streams) - len(self.last_seq)
        if grow > 0:
            self.last_own = np.vstack([self.last_own,
                                       np.full((grow, self.n), -1, dtype=np.int64)])
            self.last_seq = np.r_[self.last_seq, np.full(grow, -1, dtype=np.int64)]
        return ids[inv.ravel()]


class NoncommSlow:
    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.classes: dict[int, _SizeClass] = {}

    def update(self, fin: Finished) -> None:
        n = fin.enter.shape[1]
        keep = ~self.arena.p2p[fin.group]
        if n < 3 or not keep.any():
            return
        cls = self.classes.get(n)
        if cls is None:
            cls = self.classes[n] = _SizeClass(n, self.cfg.history)
        g, seq, own, enter = fin.group[keep], fin.seq[keep], fin.own[keep], fin.enter[keep]
        li = cls.index(g)
        # lateness and own time of every member at every call, remembered per communicator:
        # a sample is capped by the member's lateness at the call its longest own gap of the
        # span preceded (where extra compute shows, without the noise of a max over calls)
        late_ns = (enter - np.median(enter, axis=1, keepdims=True)).astype(np.float32)
        r = seq % _LATE
        cls.late[li, r] = late_ns
        cls.late_own[li, r] = own
        cls.late_seq[li, r] = seq
        sig = (self.arena.s_op[fin.slots[keep]] << 40) | self.arena.s_bytes[fin.slots[keep]]
        sid = cls.stream_ids(li, sig)
        # previous call of the same stream: an earlier row of this batch, else remembered
        o = np.lexsort((seq, sid))
        so = sid[o]
        prev_own = cls.last_own[so].copy()
        prev_seq = cls.last_seq[so].copy()
        same = np.zeros(len(o), dtype=bool)
        same[1:] = so[1:] == so[:-1]
        prev_own[1:][same[1:]] = own[o][:-1][same[1:]]
        prev_seq[1:][same[1:]] = seq[o][:-1][same[1:]]
        last = np.r_[~same[1:], True]
        cls.last_own[so[last]] = own[o][last]
        cls.last_seq[so[last]] = seq[o][last]
        back = np.empty_like(o)
        back[o] = np.arange(len(o))
        prev_own, prev_seq = prev_own[back], prev_seq[back]
        ok = (prev_seq >= 0) & (prev_seq < seq) & (seq - prev_seq <= _LATE) \
            & (own >= 0).all(axis=1) & (prev_own >= 0).all(axis=1)
        if not ok.any():
            return
        # samples of one communicator must not overlap (spans of different signatures cover the
        # same iteration): take them greedily in seq order, so each is independent evidence
        for i in np.flatnonzero(ok).tolist():
            gi = int(li[i])
            if prev_seq[i] >= cls.span_end[gi]:
                cls.span_end[gi] = seq[i]
            else:
                ok[i] = False
        if not ok.any():
            return
        li, own, prev_own, enter, seq, prev_seq = (a[ok] for a in (li, own, prev_own, enter, seq,
                                                                   prev_seq))
        ls = cls.late_seq[li]
        lo = cls.late_own[li]
        # own gap before each remembered call: its own row minus the previous seq's
        gap = (lo - np.roll(lo, 1, axis=1)).astype(np.float64)
        known = (np.roll(ls, 1, axis=1) == ls - 1)[:, :, None] & (lo >= 0) \
            & (np.roll(lo, 1, axis=1) >= 0)
        span = (ls > prev_seq[:, None]) & (ls <= seq[:, None])
        gap = np.where(span[:, :, None] & known, gap, -1.0)
        at = gap.argmax(axis=1)[:, None, :]
        late_ns = np.take_along_axis(cls.late[li], at, axis=1)[:, 0, :].astype(np.float64)
        # no gap known in the span: the lateness at this call
        cur = np.take_along_axis(cls.late[li], (seq % _LATE)[:, None, None].repeat(n, 2),
                                 axis=1)[:, 0, :]
        late_ns = np.where(gap.max(axis=1) >= 0, late_ns, cur)
        t = enter.min(axis=1)
        C = (own - prev_own).astype(np.float64)
        medC = np.median(C, axis=1, keepdims=True)
        scale = np.maximum(medC, float(self.cfg.min_compute_ns))
        x = (C - medC) / scale
        late = late_ns / scale
        a = np.clip(np.minimum(x, late), 0.0, None)
        # ring write; several rows of one group in a batch take consecutive columns
        start = np.ones(len(li), dtype=bool)
        start[1:] = li[1:] != li[:-1]
        first = np.flatnonzero(start)
        occ = np.arange(len(li)) - np.repeat(first, np.diff(np.r_[first, len(li)]))
        col = (cls.pos[li] + occ) % cls.K
        cls.x[li, col] = x
        cls.a[li, col] = a
        cls.scale[li, col] = scale[:, 0]
        cls.t[li, col] = t
        np.add.at(cls.pos, li, 1)

    def judge(self) -> list[SlowRank]:
        """Ranks whose late samples, from their best change point on, are too many to be noise
        (binomial tail against the communicator's own rate of late samples)."""
        cfg = self.cfg
        out: list[SlowRank] = []
        for cls in self.classes.values():
            G = len(cls.groups)
            if G == 0:
                continue
            K, n = cls.K, cls.n
            idx = (cls.pos[:G, None] + np.arange(K)[None, :]) % K
            x = np.take_along_axis(cls.x[:G], idx[:, :, None], axis=1).astype(np.float64)
            a = np.take_along_axis(cls.a[:G], idx[:, :, None], axis=1).astype(np.float64)
            scale = np.take_along_axis(cls.scale[:G], idx, axis=1)
            t = np.take_along_axis(cls.t[:G], idx, axis=1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                sigma = np.nan_to_num(robust_sigma(x, axis=(1, 2)), nan=0.0)      # (G,)
                thr = np.maximum(cfg.slow_min_excess / 2, cfg.slow_noise_k * sigma)
                high = a > thr[:, None, None]
                valid = ~np.isnan(a)
                # the communicator's own rate of late samples: median over members, so that
                # the faulty member does not raise it
                rate = row_quantile(high.sum(axis=1) / np.maximum(valid.sum(axis=1), 1), 0.5)
            p0 = np.clip(np.nan_to_num(rate, nan=0.0), cfg.slow_base_rate, 0.5)
            series = a.transpose(0, 2, 1).reshape(G * n, K)
            res = change_point(series, np.repeat(thr, n), np.repeat(p0, n),
                               cfg.slow_min_samples)
            # a change, not a persistent trait: late more often and by more than before the
            # split; without enough samples before it, the excess must be beyond natural spread
            need = np.where(res.pre_count >= cfg.slow_min_samples, cfg.slow_min_excess,
                            cfg.slow_min_excess_unseen)
            ok = (res.start >= 0) & (res.logp < np.log(cfg.slow_alpha_member)) \
                & (res.frac - res.pre_frac >= cfg.slow_min_frac) \
                & (res.median >= cfg.slow_min_excess) & (res.effect >= need)
            for h in np.flatnonzero(ok).tolist():
                gi, pos = divmod(h, n)
                s = int(res.start[h])
                seg = series[h, s:]
                hi = seg > thr[gi]
                excess_ns = float(np.nanmedian(seg[hi] * scale[gi, s:][hi]))
                g = cls.groups[gi]
                out.append(SlowRank(int(self.arena.members[g][pos]), g, int(t[gi, s]),
                                    float(res.median[h]), excess_ns, int(res.count[h]),
                                    float(res.frac[h]), float(sigma[gi]), float(res.logp[h])))
        return out
