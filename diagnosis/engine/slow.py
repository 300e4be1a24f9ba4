"""Non-communication slowness: a rank (or every rank of a host) that brings its own delay.

Between a call of a communicator and the call of the same signature (operation and size) one
period earlier, each member's *own* time (time outside calls) is compared with its peers' over
the same span: members of one collective do the same work. Pairing by signature makes the span
one iteration when a step issues several different calls on one communicator, and the period
(learnt from the pattern of own time before each call) does the same when a step issues several
identical ones, so compute that precedes only one of them lands in every sample. A member's
sample is its excess own time, capped by how late it actually arrived at some call of the span
(extra compute that delays nobody is not a fault), relative to the peers' median own time. A
victim that waited for a slow peer elsewhere arrives late but brings no own excess; a checkpoint
step or warm-up that is slow on every member leaves the median behind; a one-off pause is one
sample. A rank is slow when, from some change point on, most of its samples exceed the
communicator's noise, and the segment's median is both large enough to matter and many standard
errors above the noise.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.medians import median_of_valid
from diagnosis.engine.series import (
    CHANGE_LEAST,
    ChangePoint,
    binom_logsf,
    change_point,
    episode_marks,
    on_slow_rows,
    recurrence,
    recurrence_least,
    robust_sigma,
    strong_counts,
)

# calls of a communicator whose lateness is remembered: a signature recurring further apart
# than this gives no sample
_LATE = 64
# calls remembered per stream (communicator and signature), and the longest period learnt
_RING = 32
_MAX_PERIOD = 8
# the samples at the communicator's rate of late samples that a member's own rate before a
# change is weighed against (see ``_against_own_past``)
_PRIOR_SAMPLES = 16
# the episode lengths of a group none of whose members that do not recur had an episode
_NO_LENGTHS = np.zeros(0)
# the samples, in rings, that a member's past beyond its ring stands for (``LatePast``)
_PAST_RINGS = 4


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
    # slow again and again rather than from a change point on: the fraction of its samples
    # that were late since its first episode (None: a change point) and the episodes
    duty: float | None = None
    episodes: int = 0
    every_ns: float = 0.0   # the usual time between its samples (0: unknown)
    # found by its group's pace as a whole: one test, whose evidence every member carries (so
    # its members' findings are one piece of evidence, not one each)
    whole_group: bool = False
    # found by who its peers wait for at progress snapshots (``waits``): the informative
    # snapshots since onset in which it was waited for, those snapshots, and all snapshots
    waits: tuple[int, int, int] | None = None
    # from a change point on: its rate of late samples before the onset (in its ring and
    # beyond), which its samples since are judged against while it stays slow (``_still_slow``)
    base: float = 0.0


class LatePast:
    """Per group of a size class, each member's samples that its ring has let go, and how
    many of them were late: its past beyond the ring (about ``_PAST_RINGS`` rings of it,
    older samples weighing less), against which a change point inside the ring is judged
    (``_own_rate``). At real call rates a ring of full telemetry spans a third of a
    second: a GPU a few percent slower than its peers all along, late in a third of its
    samples, now and then is late in none of a ring's first few and in nearly half of the rest
    by chance, which the ring alone takes for a change. Whether a sample was late is told by
    its group's bound when it was last judged."""

    def __init__(self, n: int, K: int) -> None:
        self.keep = _PAST_RINGS * K
        self.thr = np.zeros(0)                  # per group: the late bound last judged by
        self.count = np.zeros((0, n))
        self.late = np.zeros((0, n))

    def _grow(self, size: int) -> None:
        if size <= len(self.thr):
            return
        add = max(size, 2 * len(self.thr), 64) - len(self.thr)
        n = self.count.shape[1]
        self.thr = np.r_[self.thr, np.full(add, np.nan)]
        self.count = np.vstack([self.count, np.zeros((add, n))])
        self.late = np.vstack([self.late, np.zeros((add, n))])

    def let_go(self, g: np.ndarray, a: np.ndarray) -> None:
        """Count the samples ``a`` (a row of members per entry of ``g``, their groups) that a
        write is about to overwrite."""
        if not len(g):
            return
        self._grow(int(g.max()) + 1)
        thr = self.thr[g][:, None]
        valid = ~np.isnan(a) & ~np.isnan(thr)
        np.add.at(self.count, g, valid)
        np.add.at(self.late, g, valid & (a > thr))
        rows = np.unique(g)
        most = self.count[rows].max(axis=1)
        over = most > self.keep
        if over.any():
            f = (self.keep / most[over])[:, None]
            self.count[rows[over]] *= f
            self.late[rows[over]] *= f

    def judged(self, rows: np.ndarray, thr: np.ndarray) -> None:
        self._grow(int(rows.max()) + 1)
        self.thr[rows] = thr

    def counts(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per member of the groups ``rows`` (flat, group-major): its late samples and all its
        samples in the past."""
        self._grow(int(rows.max()) + 1)
        return self.late[rows].ravel(), self.count[rows].ravel()


class _SizeClass:
    def __init__(self, n: int, K: int) -> None:
        self.n, self.K = n, K
        self.local: dict[int, int] = {}
        self.groups: list[int] = []
        # each (communicator, signature) stream's last _RING calls: own rows, seqs and the
        # members' median own time since the previous call of the stream; its learnt period
        self.streams: dict[tuple[int, int], int] = {}
        self.hist_own = np.zeros((0, _RING, n), dtype=np.int64)
        self.hist_seq = np.zeros((0, _RING), dtype=np.int64)
        self.hist_gap = np.zeros((0, _RING))
        self.count = np.zeros(0, dtype=np.int64)
        self.period = np.zeros(0, dtype=np.int64)
        self._pending: tuple[np.ndarray, ...] = ()
        # each communicator's recent lateness rows (ns) and own-time rows, by seq % _LATE
        self.late = np.zeros((0, _LATE, n), dtype=np.float32)
        self.late_own = np.zeros((0, _LATE, n), dtype=np.int64)
        self.late_seq = np.zeros((0, _LATE), dtype=np.int64)
        self.x = np.zeros((0, K, n), dtype=np.float32)
        self.a = np.zeros((0, K, n), dtype=np.float32)
        self.scale = np.zeros((0, K))
        self.t = np.zeros((0, K), dtype=np.int64)
        self.pos = np.zeros(0, dtype=np.int64)
        self.past = LatePast(n, K)
        self.span_end = np.zeros(0, dtype=np.int64)   # seq ending each group's last sample
        # what ``judge_rings`` last found per group, and at which write position
        self.judged = np.zeros(0, dtype=np.int64)
        self.found: dict[int, list[SlowRank]] = {}
        # the recurrence scan's counts, made on its first run
        self.rec_stats: RecStats | None = None

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
        grow = len(self.streams) - len(self.count)
        if grow > 0:
            self.hist_own = np.concatenate([self.hist_own,
                                            np.full((grow, _RING, self.n), -1, np.int64)])
            self.hist_seq = np.vstack([self.hist_seq, np.full((grow, _RING), -1, np.int64)])
            self.hist_gap = np.vstack([self.hist_gap, np.full((grow, _RING), np.nan)])
            self.count = np.r_[self.count, np.zeros(grow, dtype=np.int64)]
            self.period = np.r_[self.period, np.ones(grow, dtype=np.int64)]
        return ids[inv.ravel()]

    def back(self, sid: np.ndarray, occ: np.ndarray, lag: np.ndarray, own: np.ndarray,
             seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Own row and seq of the call ``lag`` occurrences before each row (rows sorted by
        stream and seq, ``occ`` their occurrence within this batch): an earlier row of the
        batch, else remembered; seq -1 when unknown."""
        j = np.arange(len(sid)) - lag
        inside = occ >= lag
        prev_own = np.full_like(own, -1)
        prev_seq = np.full(len(sid), -1, dtype=np.int64)
        prev_own[inside] = own[j[inside]]
        prev_seq[inside] = seq[j[inside]]
        n_back = self.count[sid] + occ - lag
        ring = ~inside & (n_back >= 0) & (lag - occ <= _RING)
        pos = n_back[ring] % _RING
        prev_own[ring] = self.hist_own[sid[ring], pos]
        prev_seq[ring] = self.hist_seq[sid[ring], pos]
        return prev_own, prev_seq

    def remember(self, sid: np.ndarray, occ: np.ndarray, own: np.ndarray, seq: np.ndarray,
                 gap: np.ndarray) -> np.ndarray:
        """Re-learn the period of the streams the rows (sorted by stream and seq) belong to, with
        their gaps included; returns the new periods of the rows' streams. Call ``write`` after
        reading what the rows pair with."""
        n_occ = self.count[sid] + occ
        per = np.bincount(sid, minlength=len(self.count))
        keep = n_occ >= self.count[sid] + per[sid] - _RING     # the last _RING of a long batch
        touched = np.flatnonzero(per)
        hg = self.hist_gap[touched]
        row = np.searchsorted(touched, sid[keep])
        hg[row, n_occ[keep] % _RING] = gap[keep]
        self.hist_gap[touched] = hg
        self.period[touched] = _period(hg, self.count[touched] + per[touched])
        self._pending = (sid[keep], n_occ[keep] % _RING, own[keep], seq[keep], touched,
                         per[touched])
        return self.period[sid]

    def write(self) -> None:
        """Write the rows given to ``remember`` into their streams' rings."""
        sid, pos, own, seq, touched, per = self._pending
        self.hist_own[sid, pos] = own
        self.hist_seq[sid, pos] = seq
        self.count[touched] += per


def _period(gap: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each stream's period in calls. Several identical calls per step (equal gradient buckets)
    have different compute before each: the members' median own time before each call then
    differs from call to call (beyond 20%, at over a fifth of the calls of the ring) and
    repeats at some lag (within 20%, at all but a tenth). Pairing each call with the one a
    period back makes every sample span one iteration, so compute that precedes only one of
    them lands in every sample. Otherwise (one call of the signature per step, or rare
    outliers such as warm-up or a checkpoint step): 1."""
    S = len(gap)
    out = np.ones(S, dtype=np.int64)
    if S == 0:
        return out
    # the ring in occurrence order, oldest first
    idx = (count[:, None] + np.arange(_RING)[None, :]) % _RING
    g = np.take_along_axis(gap, idx, axis=1)

    def mismatch(lag: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = g[:, lag:], g[:, :-lag]
        valid = np.isfinite(a) & np.isfinite(b)
        with np.errstate(invalid="ignore"):
            off = np.abs(a - b) > 0.2 * np.maximum(np.abs(a), np.abs(b))
        return (off & valid).sum(axis=1), valid.sum(axis=1)

    miss1, n1 = mismatch(1)
    varied = (n1 >= _RING // 2) & (miss1 > 0.2 * n1)
    found = ~varied
    for lag in range(2, _MAX_PERIOD + 1):
        miss, n = mismatch(lag)
        ok = ~found & (n >= _RING // 2) & (miss <= 0.1 * n)
        out[ok] = lag
        found |= ok
    return out


class NoncommSlow:
    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.classes: dict[int, _SizeClass] = {}

    def update(self, fin: Finished) -> None:
        n = fin.enter.shape[1]
        keep = ~self.arena.p2p[fin.group]
        if n < 2 or not keep.any():
            return
        cls = self.classes.get(n)
        if cls is None:
            cls = self.classes[n] = _SizeClass(n, self.cfg.history)
        g, seq, own, enter = fin.group[keep], fin.seq[keep], fin.own[keep], fin.enter[keep]
        li = cls.index(g)
        # lateness and own time of every member at every call, remembered per communicator:
        # a sample is capped by the member's lateness at the call its largest own excess of
        # the span preceded (where extra compute shows, without the noise of a max over calls)
        late_ns = (enter - np.median(enter, axis=1, keepdims=True)).astype(np.float32)
        r = seq % _LATE
        cls.late[li, r] = late_ns
        cls.late_own[li, r] = own
        cls.late_seq[li, r] = seq
        sig = (self.arena.s_op[fin.slots[keep]] << 40) | self.arena.s_bytes[fin.slots[keep]]
        sid = cls.stream_ids(li, sig)
        # the call of the same stream one period back (an earlier row of this batch, else
        # remembered): with one call of a signature per step that is the previous one
        o = np.lexsort((seq, sid))
        so, own_o, seq_o = sid[o], own[o], seq[o]
        start = np.ones(len(o), dtype=bool)
        start[1:] = so[1:] != so[:-1]
        first = np.flatnonzero(start)
        occ = np.arange(len(o)) - np.repeat(first, np.diff(np.r_[first, len(o)]))
        one = np.ones(len(o), dtype=np.int64)
        own1, seq1 = cls.back(so, occ, one, own_o, seq_o)
        good = (seq1 >= 0) & (own_o >= 0).all(axis=1) & (own1 >= 0).all(axis=1)
        gap = np.full(len(o), np.nan)
        gap[good] = np.median(own_o[good] - own1[good], axis=1)
        period = cls.remember(so, occ, own_o, seq_o, gap)
        prev_own, prev_seq = cls.back(so, occ, period, own_o, seq_o)
        cls.write()
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
        valid = span[:, :, None] & known
        gap = np.where(valid, gap, np.nan)
        # the call before which the member's own gap exceeds its peers' the most: where its
        # extra compute shows (the longest gap is another call's when several identical calls
        # per step have different compute before them)
        over = np.where(valid, gap - median_of_valid(gap, valid), -np.inf)
        at = over.argmax(axis=1)[:, None, :]
        late_rows = cls.late[li]
        late_ns = np.take_along_axis(late_rows, at, axis=1)[:, 0, :].astype(np.float64)
        # no gap known in the span: the lateness at this call
        cur = np.take_along_axis(late_rows, (seq % _LATE)[:, None, None].repeat(n, 2),
                                 axis=1)[:, 0, :]
        late_ns = np.where(valid.any(axis=1), late_ns, cur)
        # extra compute spread over many calls of the span (a slower GPU before every layer's
        # call of a sharded model) makes the member a little late at each: it delayed its peers
        # by the sum, which no single call shows
        spread = np.einsum("rk,rkn->rn", span.astype(np.float32), late_rows,
                           dtype=np.float64)
        late_ns = np.maximum(late_ns, spread)
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
        cls.past.let_go(li, cls.a[li, col])
        cls.x[li, col] = x
        cls.a[li, col] = a
        cls.scale[li, col] = scale[:, 0]
        cls.t[li, col] = t
        np.add.at(cls.pos, li, 1)

    def unjudged(self, groups: np.ndarray, n: int) -> np.ndarray:
        """Per communicator of ``groups`` (all of ``n`` members): samples written to its ring
        since it was last judged (0 for one without a ring yet). A ring holds ``history``
        samples: judged less often, evidence leaves it unseen."""
        cls = self.classes.get(n)
        out = np.zeros(len(groups), dtype=np.int64)
        if cls is None:
            return out
        for i, g in enumerate(groups.tolist()):
            gi = cls.local.get(g)
            if gi is not None and gi < len(cls.pos):
                judged = int(cls.judged[gi]) if gi < len(cls.judged) else -1
                out[i] = int(cls.pos[gi]) - max(judged, 0)
        return out

    def judge(self) -> list[SlowRank]:
        """Ranks whose late samples, from their best change point on, are too many to be noise
        (binomial tail against the communicator's own rate of late samples)."""
        return judge_rings(list(self.classes.values()), self.arena, self.cfg)


class Rings(Protocol):
    """Per size class, each group's ring of ``K`` samples per member of its ``n`` (see
    :func:`judge_rings`), with what the judging keeps between calls."""

    n: int
    K: int
    groups: list[int]
    x: np.ndarray
    a: np.ndarray
    scale: np.ndarray
    t: np.ndarray
    pos: np.ndarray
    judged: np.ndarray
    found: dict[int, list[SlowRank]]
    rec_stats: RecStats | None
    past: LatePast


def judge_rings(rings: Sequence[Rings], arena: Arena, cfg: EngineConfig,
                min_excess: float | None = None, crowd: int | None = None,
                min_shift: float | None = None, episodes_from_ns: int = 0) -> list[SlowRank]:
    """The slow members of every group of ``rings`` (objects holding, per size class, each
    group's ring of ``K`` samples per member: ``x`` the excess, ``a`` the excess that counts,
    ``scale`` (ns per unit), ``t`` sample times, ``pos`` write positions, ``groups``), at the
    member significance ``slow_alpha_member``; ``min_excess`` (default ``slow_min_excess``): the
    smallest excess worth a report, in the samples' unit (the same at every call for a ring:
    each group's verdict is kept until its ring changes). ``crowd``: a sample in which more
    members than this are off the group's median (beyond the recurrence threshold, early or
    late) counts for none of them (see ``_crowded``); None: every sample counts.
    ``min_shift`` (default ``min_excess``): the smallest excess worth a report when it comes as a
    lasting change of level against the member's own past, which every later sample confirms
    (episodes, and members without enough past, need ``min_excess``). ``episodes_from_ns``:
    samples before this time are no episodes (a job's warm-up; see ``_recurring``)."""
    least = cfg.slow_min_excess if min_excess is None else min_excess
    unseen = cfg.slow_min_excess_unseen * least / cfg.slow_min_excess
    shift = least if min_shift is None else min_shift
    out: list[SlowRank] = []
    for cls in rings:
        G = len(cls.groups)
        if G == 0:
            continue
        # a group's verdict depends on its ring alone: judge only those with new samples
        if len(cls.judged) < G:
            cls.judged = np.r_[cls.judged, np.full(G - len(cls.judged), -1, dtype=np.int64)]
        rows = np.flatnonzero(cls.pos[:G] != cls.judged[:G])
        cls.judged[rows] = cls.pos[rows]
        before = {gi: cls.found.pop(gi) for gi in rows.tolist() if gi in cls.found}
        if len(rows):
            _judge_rows(cls, rows, arena, cfg, least, unseen, crowd, shift, before,
                        episodes_from_ns)
        for found in cls.found.values():
            out.extend(found)
    return out


def _crowded(x: np.ndarray, thr: np.ndarray, crowd: int) -> np.ndarray:
    """Per group and sample of ``x`` (groups, samples, members): whether more than ``crowd``
    members are off the median beyond ``thr`` (per group), early or late. A slow GPU (or two
    faults) makes one or two members late, the rest on time; when more are off at once, each
    came late by what it did elsewhere (its own data-parallel transfer, on a rail of its own,
    ending late; an uneven checkpoint), or the median is itself late and the members on time
    seem early. Such a sample is an event of the job or of its network, no evidence against
    any member."""
    with np.errstate(invalid="ignore"):
        off = np.abs(x) > thr[:, None, None]
    return off.sum(axis=2) > crowd


def _judge_rows(cls: Rings, rows: np.ndarray, arena: Arena, cfg: EngineConfig, least: float,
                unseen: float, crowd: int | None, shift: float,
                before: dict[int, list[SlowRank]], episodes_from_ns: int = 0) -> None:
    """Judge the groups ``rows`` of ``cls``, keeping what each is found in ``cls.found``
    (``crowd``, ``shift``, ``episodes_from_ns``: see ``judge_rings``; ``before``: per row of
    ``cls``, what it was found in when last judged)."""
    G = len(rows)
    K, n = cls.K, cls.n
    # the rings oldest first, each gathered at once from the flat (group, slot) rows
    idx = (cls.pos[rows, None] + np.arange(K)[None, :]) % K + rows[:, None] * K
    x = cls.x.reshape(-1, n)[idx].astype(np.float64)
    a = cls.a.reshape(-1, n)[idx].astype(np.float64)
    scale = np.take(cls.scale, idx)
    t = np.take(cls.t, idx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # the noise is how much a member's samples move from one to the next, which a
        # change of level leaves alone: the spread between members is the fault itself when
        # half of them are slow (two members mirror each other, each measured against their
        # mean; of four, two on one slow host put the median between the hosts)
        step = np.diff(x, axis=1) / np.sqrt(2.0)
        sigma = np.nan_to_num(robust_sigma(step, axis=(1, 2)), nan=0.0)      # (G,)
        thr = np.maximum(shift / 2, cfg.slow_noise_k * sigma)
        rec_thr = np.maximum(cfg.slow_rec_min_excess * least / cfg.slow_min_excess,
                             cfg.slow_rec_noise_k * sigma)
        if crowd is not None and n > crowd + 1:
            a = np.where(_crowded(x, rec_thr, crowd)[:, :, None], np.nan, a)
        high = a > thr[:, None, None]
        valid = ~np.isnan(a)
        # the communicator's own rate of late samples: the lower median over members, so
        # that the faulty ones do not raise it (of two, the lower; of four, half of which may
        # be one slow host's, the second lowest)
        per_member = high.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
        rate = np.sort(per_member, axis=1)[:, (n - 1) // 2]
    p0 = np.clip(np.nan_to_num(rate, nan=0.0), cfg.slow_base_rate, 0.5)
    series = a.transpose(0, 2, 1).reshape(G * n, K)
    p0_rows = np.repeat(p0, n)
    res = on_slow_rows(change_point, CHANGE_LEAST, series, np.repeat(thr, n), p0_rows,
                           cfg.slow_min_samples)
    past_late, past_count = cls.past.counts(rows)
    cls.past.judged(rows, thr)
    own = _own_rate(res, p0_rows, past_late, past_count)
    res = _against_own_past(res, own, p0_rows)
    # a change, not a persistent trait: late more often and by more than before the split
    # (in the ring and beyond it); without enough samples before it in the ring, the excess
    # must be beyond natural spread
    frac_before = (res.pre_frac * res.pre_count + past_late) \
        / np.maximum(res.pre_count + past_count, 1)
    need = np.where(res.pre_count >= cfg.slow_min_samples, shift, unseen)
    ok = (res.start >= 0) & (res.logp < np.log(cfg.slow_alpha_member)) \
        & (res.frac - frac_before >= cfg.slow_min_frac) \
        & (res.median >= shift) & (res.effect >= need)
    for h in np.flatnonzero(ok).tolist():
        gi, pos = divmod(h, n)
        s = int(res.start[h])
        seg = series[h, s:]
        hi = seg > thr[gi]
        excess_ns = float(np.nanmedian(seg[hi] * scale[gi, s:][hi]))
        g = cls.groups[int(rows[gi])]
        cls.found.setdefault(int(rows[gi]), []).append(
            SlowRank(int(arena.members[g][pos]), g, int(t[gi, s]), float(res.median[h]),
                     excess_ns, int(res.count[h]), float(res.frac[h]), float(sigma[gi]),
                     float(res.logp[h]), base=float(own[h])))
    level_start = np.where(ok, res.start, -1)
    _still_slow(cls, rows, before, series, thr, t, ok, level_start, arena, cfg, shift)
    if episodes_from_ns > 0:
        # the warm-up's lateness neither makes episodes nor sets the class's rate of them
        series = np.where(np.repeat(t, n, axis=0) >= episodes_from_ns, series, np.nan)
    _recurring(cls, rows, series, sigma, rec_thr, scale, t, level_start, arena, cfg, least,
               thr)


def _own_rate(res: ChangePoint, p0: np.ndarray, past_late: np.ndarray,
              past_count: np.ndarray) -> np.ndarray:
    """Each member's own rate of late samples before the split, where that is above the
    communicator's ``p0``: a noisier GPU late in a sixth of its samples all along, late in
    seven of its last nine, is no change as unlikely as the communicator's rate (a thirtieth)
    makes it (a healthy job's member 2 % late passed ``slow_alpha`` so). It is known from its
    ``pre_count`` samples and the ``past_count`` its ring let go (``LatePast``; ``past_late``
    of them late), weighed against ``_PRIOR_SAMPLES`` at the communicator's: a GPU late at
    three of its eight samples before a fault (its warm-up) is not taken to be late two times
    in five."""
    pre = res.pre_frac * res.pre_count + past_late
    return np.maximum(p0, (pre + _PRIOR_SAMPLES * p0)
                      / (res.pre_count + past_count + _PRIOR_SAMPLES))


def _against_own_past(res: ChangePoint, own: np.ndarray, p0: np.ndarray) -> ChangePoint:
    """``res`` with each member's significance taken against its ``own`` rate of late samples
    where that is above the communicator's ``p0`` (``_own_rate``)."""
    rows = np.flatnonzero((res.start >= 0) & (own > p0))
    if not len(rows):
        return res
    logp = res.logp.copy()
    hits = np.rint(res.frac[rows] * res.count[rows]).astype(np.int64)
    logp[rows] = np.maximum(logp[rows], binom_logsf(hits, res.count[rows], own[rows]))
    return replace(res, logp=logp)


def _still_slow(cls: Rings, rows: np.ndarray, before: dict[int, list[SlowRank]],
                series: np.ndarray, thr: np.ndarray, t: np.ndarray, ok: np.ndarray,
                level_start: np.ndarray, arena: Arena, cfg: EngineConfig,
                shift: float) -> None:
    """Keep the members found slow from a change point on that are still slow since it, though
    the test no longer finds it: once the ring holds little from before the onset (a fault
    that lasts longer than the ring), the split the test prefers moves among samples that are
    all slow, and a small excess is as strong as noise there. Tested at the onset it was
    found at: since then late in most samples (more often than before it, by the rise the
    test asks), by at least ``shift`` in the median. Its evidence is the stronger of what
    found it and its late samples since the onset against its rate before (``base``): a GPU
    late in two samples in five all along, then slower, is found at a split with few samples
    after it, weakly, and confirmed as they come. ``ok`` (per member row): found now, and
    ``level_start`` its first sample since the onset, updated."""
    n = cls.n
    at = {int(gi): i for i, gi in enumerate(rows.tolist())}
    for gi, found in before.items():
        i = at[gi]
        g = cls.groups[gi]
        for f in found:
            if f.duty is not None or f.whole_group:
                continue
            pos = int(np.flatnonzero(arena.members[g] == f.rank)[0])
            h = i * n + pos
            if ok[h]:
                continue
            y = series[h]
            valid = ~np.isnan(y)
            since = valid & (t[i] >= f.onset_ns)
            pre = valid & (t[i] < f.onset_ns)
            if since.sum() < cfg.slow_min_samples:
                continue
            frac = float(np.mean(y[since] > thr[i]))
            pre_frac = float(np.mean(y[pre] > thr[i])) if pre.any() else 0.0
            median = float(np.median(y[since]))
            if frac >= 0.5 and frac - pre_frac >= cfg.slow_min_frac and median >= shift:
                ok[h] = True
                level_start[h] = int(np.argmax(t[i] >= f.onset_ns))
                count = int(since.sum())
                now = float(binom_logsf(np.array([round(frac * count)]), np.array([count]),
                                        np.array([max(f.base, cfg.slow_base_rate)]))[0])
                cls.found.setdefault(gi, []).append(replace(
                    f, excess=median, samples=count, frac=frac, logp=min(f.logp, now)))


class RecStats:
    """Per group of a size class, what its members' recurrence scan saw when last judged:
    episode starts and samples per member, and the lengths of the episodes of members that do
    not recur; the class's rates and lengths of benign episodes come from every group (a
    group is judged only when its ring changes, the others keep their counts)."""

    def __init__(self, n: int) -> None:
        self.begins = np.zeros((0, n))
        self.valid = np.zeros((0, n))
        self.lengths: dict[int, np.ndarray] = {}

    def update(self, rows: np.ndarray, begins: np.ndarray, valid: np.ndarray,
               lengths: dict[int, np.ndarray]) -> None:
        need = int(rows.max()) + 1 if len(rows) else 0
        if need > len(self.begins):
            grow = max(need, 2 * len(self.begins)) - len(self.begins)
            pad = np.zeros((grow, self.begins.shape[1]))
            self.begins, self.valid = np.vstack([self.begins, pad]), np.vstack([self.valid, pad])
        self.begins[rows] = begins
        self.valid[rows] = valid
        self.lengths.update(lengths)

    def rate(self, floor: float, trim: float = 0.1) -> float:
        seen = self.valid > 0
        if not seen.any():
            return floor
        rate = np.sort((self.begins[seen] / self.valid[seen]).ravel())
        keep = rate[: max(1, int(np.ceil((1 - trim) * len(rate))))]
        return float(min(max(float(keep.mean()), floor), 0.5))

    def length(self, default: float = 2.0, least: int = 20) -> float:
        every = [v for v in self.lengths.values() if len(v)]
        lengths = np.concatenate(every) if every else np.zeros(0)
        if len(lengths) < least:
            return default
        return float(max(np.percentile(lengths, 90), 1.0))


def _recurring(cls: Rings, rows: np.ndarray, series: np.ndarray, sigma: np.ndarray,
               rec_thr: np.ndarray, scale: np.ndarray, t: np.ndarray, level_start: np.ndarray,
               arena: Arena, cfg: EngineConfig, least: float, level_thr: np.ndarray) -> None:
    """Members of the groups ``rows`` slow again and again with normal iterations between (a
    GPU throttling now and then, a host's recurring stall): at least ``slow_rec_episodes``
    episodes of samples well above the noise, too many for the rate at which such episodes
    start over every member of the size class (one-off pauses strike random ranks; a
    checkpoint every rank). ``series``: per member (rows group-major), its samples oldest
    first; ``rec_thr``: per group, the excess an episode's samples must exceed;
    ``level_start``: per member, the first sample of the level it was found slow at from a
    change point on (-1: none), a finding replaced by the recurring one when most of their
    samples since were normal (their late samples are episodes, not a new level), unless the
    excess since its level began is small and lasting (late in most samples beyond
    ``level_thr``, per group what the change-point test counts as late, the median under
    ``rec_thr``): an early episode of noise does not move a level's onset. Kept in
    ``cls.found``."""
    n = cls.n
    thr = np.repeat(rec_thr, n)
    stats = cls.rec_stats
    if stats is None:
        stats = cls.rec_stats = RecStats(n)
    valid = np.isfinite(series)
    _, high, begins = episode_marks(series, thr)
    quiet = begins.sum(axis=1) < cfg.slow_rec_episodes
    # the strong lengths of the quiet members' episodes (see series.episode_length), for
    # every group at once: the runs are counted row by row
    runs = np.zeros((len(series), series.shape[1] + 1))
    if quiet.any():
        runs[quiet] = strong_counts(series[quiet], high[quiet], begins[quiet])
    # each group's lengths, its members in order (one split instead of a step per group,
    # over the groups that have any: most, in a healthy job, have none)
    on = quiet[:, None] & (runs[:, 1:] > 0)
    per_group = on.sum(axis=1).reshape(len(rows), n).sum(axis=1)
    lengths = dict.fromkeys(rows.tolist(), _NO_LENGTHS)
    has = np.flatnonzero(per_group)
    if len(has):
        parts = np.split(runs[:, 1:][on], np.cumsum(per_group[has])[:-1])
        lengths.update(zip(rows[has].tolist(), parts, strict=True))
    stats.update(rows, begins.sum(axis=1).reshape(len(rows), n),
                 valid.sum(axis=1).reshape(len(rows), n), lengths)
    p0 = stats.rate(cfg.slow_rec_base_rate)
    rec = on_slow_rows(recurrence, recurrence_least(cfg.slow_rec_episodes), series, thr,
                       np.full(len(series), p0), cfg.slow_rec_episodes, stats.length())
    ok = (rec.start >= 0) & (rec.logp < np.log(cfg.slow_alpha_member)) \
        & (rec.median >= least)
    recurs = rec.hits < cfg.slow_rec_duty * np.maximum(rec.count, 1)
    # a small lasting excess: late in most samples since, at what the change-point test counts
    # as late, its typical sample under what an episode needs (a GPU 12% slower, a few of
    # whose samples cross the episodes' threshold) is a level
    found = level_start >= 0
    if found.any():    # (only those: a 100k-member pass finds a level for a handful)
        f = np.flatnonzero(found)
        since = valid[f] & (np.arange(series.shape[1])[None, :] >= level_start[f, None])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            late = (series[f] > np.repeat(level_thr, n)[f, None]) & since
            typical = np.nanmedian(np.where(since, series[f], np.nan), axis=1)
        lasting = late.sum(axis=1) >= 0.5 * np.maximum(since.sum(axis=1), 1)
        recurs[f] &= ~(lasting & (typical < thr[f]))
    for h in np.flatnonzero(ok & (~found | recurs)).tolist():
        gi, pos = divmod(h, n)
        s = int(rec.start[h])
        seg = series[h, s:]
        hi = seg > thr[h]
        excess_ns = float(np.nanmedian(seg[hi] * scale[gi, s:][hi]))
        key = int(rows[gi])
        g = cls.groups[key]
        rank = int(arena.members[g][pos])
        frac = float(rec.hits[h] / max(int(rec.count[h]), 1))
        # late in most of its samples since: slow all along with a few normal samples
        duty = frac if frac < cfg.slow_rec_duty else None
        ts = t[gi, s:][np.isfinite(seg)]
        every = float(np.median(np.diff(ts))) if len(ts) > 1 else 0.0
        mine = [f for f in cls.found.get(key, []) if f.rank != rank]
        cls.found[key] = [*mine, SlowRank(
            rank, g, int(t[gi, s]), float(rec.median[h]), excess_ns, int(rec.count[h]), frac,
            float(sigma[gi]), float(rec.logp[h]), duty=duty, episodes=int(rec.episodes[h]),
            every_ns=every)]
