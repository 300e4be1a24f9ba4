"""Communicators that compute slower: a slow host (or a slow GPU) stretches the time between the
calls of the communicators it is in, while its victims keep their pace between waits.

With sampled calls, lateness inside a call shows a slow GPU among its peers (``straggle``), but
a host whose every GPU is slow is late to nothing inside its own tensor-parallel group: its
members come together, only slower. What changes is that group's pace: its time between two
kept calls against what its replicas (the data-parallel replicas of its pipeline stage, which
run the same calls in the same order) took over the same calls, ``replicas``. A span of a few
dozen calls mixes work of different cost (a backward pass computes about twice as long per call
as a forward one), so only the same calls compare like with like, whichever passes a group's
kept calls happen to span. Its victims (the next pipeline stages, the other replicas) wait now
and then but compute as fast as before, so a low quantile of their paces (the spans without a
wait) does not move. Per bucket, each group's low quantile is compared with that of the
groups of its size (which cancels what moves the whole job), and a group whose ratio rises
from some bucket on is slow. A bucket is one or a few of the job's iterations where their
calls show them (``cycle``: a slow pass must not share its bucket with a normal pass of the
iteration before or after), else a stretch of time. A group without replicas is judged by
its time per call. A host slow only now and then (one iteration in three) is behind in some
buckets only: that is judged as episodes of its fastest span per bucket, beside the replicas
of its stage, in buckets where no more groups are behind than a fault or two explain
(``GroupPace._recurring``). With one call in 32 to 256 kept, a group's kept calls lie too far
apart for spans of a few dozen calls: spans then run over up to 2K calls, the replicas' time
over them is read off their kept calls pooled (``replicas.pooled_time``), and a bucket's value
is the median of the spans in which the replicas computed throughout (``GroupPace._calm``),
and an episode must be half again as slow as the replicas (a bucket of a few calm spans is
noisy). Such a bucket holds a few iterations, and its median keeps the pace of the normal ones
of a host slow one iteration in a few: its episodes are judged per window of about four kept
calls as well (``GroupPace._write_windows``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.cycle import Cycle, learn_cycle
from diagnosis.engine.medians import nanmedian
from diagnosis.engine.replicas import KeptCalls, Replicas, pooled_time, replica_time
from diagnosis.engine.series import (
    CHANGE_LEAST,
    binom_logsf,
    change_point,
    episode_length,
    episode_rate,
    on_slow_rows,
    recurrence,
    recurrence_least,
    robust_sigma,
)

# the quantile of a bucket's per-call periods that stands for the group's compute pace: low, so
# that spans which include a wait (a bubble, the others' lateness) do not count
_Q = 0.2
_MIN_PERIODS = 4      # periods a group needs in a bucket to have a value there
_MIN_CALM = 3         # calm spans it needs there, with kept calls K apart (``_calm``)
# the share of the buckets after a change that must be behind, at about one level, with kept
# calls K apart (``_MIN_FRAC`` otherwise)
_WIDE_FRAC = 0.8
# the share of a group's buckets after the change that must be slow: a quantile of a few
# periods is noisy, and a slow host's pace is behind in nearly every bucket
_MIN_FRAC = 0.6
# buckets a group needs before the change: groups differ by role (a pipeline stage with the
# loss, or the embedding, keeps another pace), so only a change against its own past counts
_MIN_BEFORE = 3
_LEARN = 64           # spacings of kept calls seen before the bucket length is chosen
# and the time the spans seen must cover before the iterations are learnt (``cycle``): five
# iterations at least of the jobs whose iterations are to be found (until then, and in the
# others, spans are cut by time)
_LEARN_NS = 10_000_000_000
_MAX_SPAN = 32        # the most calls between two kept calls whose period counts
# from this sampling factor on, a group's kept calls are mostly more than ``_MAX_SPAN`` apart:
# spans reach ``_WIDE_SPANS`` times K, its replicas' time is read off their kept calls pooled
# (``replicas.pooled_time``), and a bucket's value is the median of its calm spans (see
# ``GroupPace._close``)
_WIDE_AT = 32
_WIDE_SPANS = 2
# ... and the fewest buckets after a change it is judged on (``slow_min_samples`` otherwise):
# a bucket's value is then the median of several calm spans, each against a dozen replicas
# pooled, and some buckets after a slow host's onset have none (its replicas waited for it in
# most spans), so six took about a third of a run of forty iterations
_WIDE_MIN_SAMPLES = 4
# ... up to this factor: past it a group keeps a call every few seconds, a bucket of eight
# spans tens of seconds, and taking them up cost a 16,384-rank job (at K = 1024) 3.5 s more
# detector lag in its first minute (bench.scale.job)
_WIDE_MAX = 256
# the least excess of an episode with kept calls K apart: a bucket's value is then the median of
# a few calm spans, and where a link is slow, healthy groups reached 0.1-0.3 in three buckets of
# a run of 80 iterations (bench.accuracy), which made them hosts slow again and again
_WIDE_REC_LEAST = 0.5
# a span whose replicas took at most this many times their least time per call in the bucket
# is calm: they computed throughout, waiting for no one
_CALM = 2.0
# ... or, in a bucket with fewer than ``_MIN_CALM`` such spans, this many: a backward pass
# computes about twice as long per call as a forward one (the least is mostly a forward
# span's), so the spans of backward calls fall about the bound above, and a slow host's
# buckets kept too few for a value (bench.accuracy at K = 64); spans that hold a wait took
# three times the least or more there. Where enough spans are within the bound above, the
# wider one is not used: it takes in spans that hold a little wait, which pull a host a tenth
# slower back toward its replicas
_CALM_WIDER = 2.5
# with kept calls K apart, the windows of the recurrence test (``GroupPace._write_windows``),
# whole iterations of the cycle: about this many kept calls of a group each
_WINDOW_KEPT = 4
# ... the calm spans a group needs in one for a value there: a one-off pause (a garbage
# collection) or a wait of its own at a point of its pipeline's schedule slows one span, which
# the lower median of two leaves out
_WINDOW_SPANS = 2
# ... and their rows kept per row of buckets (``_Size.windows``)
_WINDOW_ROWS = 4
# the most buckets a bucket waits for late periods (see ``GroupPace._lag``): a rank whose
# records come very late must not hold every bucket open
_MAX_LAG = 16
# groups of a size that faults of their own put behind in one bucket: beyond, a bucket is an
# event of the whole job or of its network (see ``GroupPace._recurring``)
_FAULTS_AT_ONCE = 2
# the fewest groups with a value in a bucket for their spread there to be its noise
_SPREAD_GROUPS = 8
# the least time over the same calls, against its replicas', that a span of a group counts with:
# no group computes the same work twice as fast as its replicas; where it seems to, they
# waited for it (a slow host's replicas, at the data-parallel all-reduce of each iteration)
_LEAST_RATIO = 0.5
# buckets of kept calls kept before the oldest span still to write (see ``update``)
_KEEP_BUCKETS = 16
# a span whose replicas took this many times their usual time per call there (in the group's
# bucket) holds a wait of theirs (a bubble of the pipeline, the data-parallel all-reduce): no
# measure of how fast the group computes (see ``GroupPace._close``)
_WAITED = 3.0


@dataclass
class SlowGroup:
    group: int
    onset_ns: int
    excess: float         # median relative excess of its pace over its peers' after onset
    samples: int
    frac: float
    logp: float
    # behind again and again rather than from a change point on: the fraction of its buckets
    # behind since its first episode (None: a change point), its episodes
    duty: float | None = None
    episodes: int = 0
    # the usual time between its buckets since its onset, those with a value (behind again
    # and again) or all (a change point: a bucket's span; 0: unknown)
    every_ns: float = 0.0


def _spacing(t: np.ndarray) -> float:
    """The usual time between the bucket times ``t`` (0: fewer than two written)."""
    t = t[t > 0]
    return float(np.median(np.diff(t))) if len(t) > 1 else 0.0


def _no_spans(fields: int) -> list[np.ndarray]:
    return [np.zeros(0, dtype=np.int64) for _ in range(fields)]


class _Size:
    """The groups of one size: their series of bucket values, groups along the columns."""

    def __init__(self, K: int) -> None:
        self.K = K
        self.col: dict[int, int] = {}
        self.groups: list[int] = []
        # (room for more columns than groups: a job's thousands of groups come a few at a
        # time, and growing by one column copied every series each time)
        self._x = np.full((K, 0), np.nan)
        self._low = np.full((K, 0), np.nan)  # the same from each bucket's fastest period
        # with kept calls K apart and iterations known: per window of a few iterations,
        # each group's calm spans over the size's median (``GroupPace._write_windows``)
        self.KW = K * _WINDOW_ROWS
        self._windows = np.full((self.KW, 0), np.nan)
        self.wt = np.zeros(self.KW, dtype=np.int64)
        self.wpos = 0
        # per column, its peers of the same role, and the (groups, communicators) known then
        self.role_peers: list[list[int]] = []
        self.role_known = (0, 0)
        self.t = np.zeros(K, dtype=np.int64)
        self.pos = 0

    @property
    def x(self) -> np.ndarray:
        return self._x[:, : len(self.groups)]

    @property
    def low(self) -> np.ndarray:
        return self._low[:, : len(self.groups)]

    @property
    def windows(self) -> np.ndarray:
        return self._windows[:, : len(self.groups)]

    def column(self, g: int) -> int:
        c = self.col.get(g)
        if c is None:
            c = self.col[g] = len(self.groups)
            self.groups.append(g)
            if c == self._x.shape[1]:
                more = max(c, 8)
                self._x, self._low, self._windows = (
                    np.hstack([a, np.full((len(a), more), np.nan)])
                    for a in (self._x, self._low, self._windows))
        return c


def _above_own_noise(x: np.ndarray, spread: np.ndarray, thr: float, k: float) -> np.ndarray:
    """``x`` (groups, buckets) with each value that is above ``thr`` but within ``k`` times
    its bucket's ``spread`` (the groups' robust sigma there) lowered to ``thr``: not behind.
    Some buckets are far noisier than the ring's usual one (the partial bucket a job's last
    records leave, the stretch in which a slow link or switch makes the groups on its paths
    wait in their calm spans), and a group a little above the usual threshold for the few
    buckets a change needs, there, is within their noise. A bucket of too few groups for a
    spread keeps the usual threshold."""
    with np.errstate(invalid="ignore"):
        n = (~np.isnan(x)).sum(axis=0)
        bar = np.where((n >= _SPREAD_GROUPS) & np.isfinite(spread),
                       np.maximum(thr, k * np.nan_to_num(spread, nan=0.0)), thr)
        within = (x > thr) & (x <= bar[None, :])
    return np.where(within, thr, x)


def _level_share(x: np.ndarray, start: np.ndarray, median: np.ndarray) -> np.ndarray:
    """Per row, the share of its samples from ``start`` on that reach half of ``median`` (its
    typical sample above the noise there). A host slow from some moment on holds its pace
    behind at about one level, so nearly all of them do; buckets far behind now and then with
    buckets at the noise between are episodes (a group whose few kept calls straddle the waits
    that a slow network puts into every group's spans, an intermittent fault), which the
    recurrence test judges, not the change point: the noise's own upper tail would else make
    up the share of buckets behind."""
    col = np.arange(x.shape[1])[None, :]
    after = (col >= start[:, None]) & ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        strong = after & (x >= 0.5 * np.nan_to_num(median, nan=np.inf)[:, None])
    return strong.sum(axis=1) / np.maximum(after.sum(axis=1), 1)


def _reached(x: np.ndarray, start: np.ndarray, median: np.ndarray) -> np.ndarray:
    """Per row, its first sample from ``start`` on that reaches half of ``median`` (the level
    it was behind at after the change): the split of the change-point test may fall on
    buckets with no value, or before a sample or two just above the noise, well before the
    change."""
    col = np.arange(x.shape[1])[None, :]
    with np.errstate(invalid="ignore"):
        strong = (col >= start[:, None]) & (x >= 0.5 * median[:, None])
    first = np.argmax(strong, axis=1)
    return np.where(strong.any(axis=1), first, np.maximum(start, 0))


class GroupPace:
    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.bucket_ns = config.straggle_bucket_ns
        self.last_first: dict[int, tuple[int, int]] = {}   # group -> (seq, first entry)
        # spans not yet in a bucket (group, end time, duration, start time, start seq, end
        # seq), and those of buckets not yet written (bucket, then the same but the end time)
        self._pend = _no_spans(6)
        self._open = _no_spans(6)
        # per kind of bucket (the size of the groups cut by their iterations, 0 for time
        # buckets): the newest bucket seen, the newest written, and how many buckets behind
        # the newest the spans of an update have reached: a trace read in chunks hands over
        # the same span of time twice (the calls completed by each chunk), and a bucket
        # written before the second came would lose half its spans
        self._newest: dict[int, int] = {}
        self._closed: dict[int, int] = {}
        self._lag: dict[int, int] = {}
        self._written_ns = 0      # the end of the newest span written
        self.span = 0             # bucket length, chosen from the first kept calls' spacing
        self._gaps: list[int] = []
        # per size of group, its iterations (learnt with the bucket length): its groups'
        # spans are cut by iteration rather than by time where it has them
        self.cycles: dict[int, Cycle] = {}
        self._learnt = False
        self._seen = _no_spans(6)    # the spans seen before, to learn them from
        self.replicas = Replicas(arena)
        self.calls = KeptCalls()
        self.sizes: dict[int, _Size] = {}
        self.sample = 1           # the stream's sampling factor (``Engine.set_sample``)

    @property
    def wide(self) -> bool:
        """Kept calls lie 32 to 256 calls apart: spans run over up to 2K calls, and a bucket
        spans several iterations."""
        return _WIDE_AT <= self.sample <= _WIDE_MAX

    def update(self, fin: Finished) -> None:
        """Take finished kept collectives (per group in seq order; the groups of a batch may
        come one after the other, each over the batch's whole span of time)."""
        keep = ~self.arena.p2p[fin.group]
        if not keep.any():
            return
        g = fin.group[keep]
        sq = fin.seq[keep]
        t = fin.enter[keep].min(axis=1)
        o = np.lexsort((sq, g))
        g, sq, t = g[o], sq[o], t[o]
        head = np.r_[True, g[1:] != g[:-1]]
        prev_s = np.r_[-1, sq[:-1]]
        prev_t = np.r_[-1, t[:-1]]
        for i in np.flatnonzero(head).tolist():
            prev_s[i], prev_t[i] = self.last_first.get(int(g[i]), (-1, -1))
        last = np.r_[head[1:], True]
        for gg, ss, tt in zip(g[last].tolist(), sq[last].tolist(), t[last].tolist(),
                              strict=True):
            self.last_first[gg] = (ss, tt)
        self.calls.add(g, sq, t)
        # (a span of many calls includes the waits of the group's victims too: their pace
        # would seem to fall behind as much as the culprit's)
        most = _WIDE_SPANS * self.sample if self.wide else _MAX_SPAN
        ok = (prev_s >= 0) & (sq > prev_s) & (t > prev_t) & (sq - prev_s <= most)
        self._pend = [np.r_[a, b] for a, b in zip(
            self._pend, (g[ok], t[ok], t[ok] - prev_t[ok], prev_t[ok], prev_s[ok], sq[ok]),
            strict=True)]
        if not self.span:
            self._gaps.extend((t[ok] - prev_t[ok]).tolist())
            if len(self._gaps) < _LEARN:
                return
            # a bucket long enough for about eight kept calls of a typical group
            unit = self.bucket_ns
            self.span = int(min(max(np.ceil(8 * np.median(self._gaps) / unit), 1), 16)) * unit
        pend, self._pend = self._pend, _no_spans(6)
        if not self._learnt:
            self._seen = [np.r_[a, b] for a, b in zip(self._seen, pend, strict=True)]
            if int(self._seen[1].max() - self._seen[3].min()) >= _LEARN_NS:
                self._learn()
        pb, pk = self._buckets(pend[0], pend[1], pend[4])
        closed = np.full(len(pb), -1, dtype=np.int64)
        for key, last in self._closed.items():
            closed[pk == key] = last
        fresh = pb > closed                 # (else a bucket already written)
        self._open = [np.r_[a, b[fresh]] for a, b in zip(self._open, [pb, pend[0], *pend[2:]],
                                                          strict=True)]
        if not len(self._open[0]):
            return
        ob, ok_ = self._open[0], self._key(self._open[1])
        for key in np.unique(pk).tolist():
            if key in self._newest:
                behind = self._newest[key] - int(pb[pk == key].min())
                self._lag[key] = min(max(self._lag.get(key, 0), behind), _MAX_LAG)
        done = np.zeros(len(ob), dtype=bool)
        for key in np.unique(ok_).tolist():
            sel = ok_ == key
            newest = self._newest[key] = max(self._newest.get(key, -1), int(ob[sel].max()))
            # a bucket is written once calls two buckets (or the lag seen) later arrive (the
            # groups' rows of one moment may come a bucket apart)
            now = sel & (ob < newest - max(1, self._lag.get(key, 0)))
            if now.any():
                self._close(key, *(a[now] for a in self._open))
                self._closed[key] = int(ob[now].max())
                self._written_ns = max(self._written_ns,
                                       int((self._open[3] + self._open[2])[now].max()))
                done |= now
        if done.any():
            self._open = [a[~done] for a in self._open]
            # a replica may reach the same calls a while later or earlier (a slow one, until
            # the data-parallel all-reduce of the iteration brings them together)
            oldest = int(self._open[3].min()) if len(self._open[0]) else self._written_ns
            self.calls.forget_before(oldest - _KEEP_BUCKETS * self.span)

    def _learn(self) -> None:
        """Learn each size's iterations from the spans seen so far (see ``cycle``), and cut
        the spans of a size that has them, from the buckets not yet written on, by iteration:
        a bucket already written stays (its time is not counted twice)."""
        g, _, dt, _, s1, s2 = self._seen
        self._learnt, self._seen = True, _no_spans(6)
        n = self.arena.n[g]
        for size in np.unique(n).tolist():
            sel = n == size
            cycle = learn_cycle(g[sel], s1[sel], s2[sel], dt[sel])
            if cycle is None:
                continue
            # whole iterations enough for about eight kept calls of a typical group
            spans = float(np.median(s2[sel] - s1[sel]))
            cycle = replace(cycle, per_bucket=max(int(np.ceil(8 * spans / cycle.period)), 1))
            self.cycles[size] = cycle
            # the time buckets' lag, in buckets of iterations
            bucket_ns = cycle.period * cycle.per_bucket * float(np.sum(dt[sel]) /
                                                                np.sum(s2[sel] - s1[sel]))
            self._lag[size] = min(int(np.ceil(self._lag.get(0, 0) * self.span / bucket_ns)),
                                  _MAX_LAG)
            mine = self.arena.n[self._open[1]] == size
            self._open[0][mine] = cycle.bucket(self._open[4][mine])

    def _key(self, g: np.ndarray) -> np.ndarray:
        """Per group, its kind of bucket: its size where that has iterations, else 0."""
        n = self.arena.n[g]
        return np.where(np.isin(n, list(self.cycles)), n, 0)

    def _buckets(self, g: np.ndarray, end: np.ndarray, s1: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Per span, its bucket and kind of bucket: the iteration its first call is in, where
        its group's size has iterations (a bucket of time would hold the end of one iteration
        and the start of the next, and a host slow in one iteration in a few would share each
        of its buckets with a normal one), else the time bucket it ends in."""
        key = self._key(g)
        b = end // self.span
        for k in np.unique(key[key > 0]).tolist():
            sel = key == k
            b[sel] = self.cycles[k].bucket(s1[sel])
        return b, key

    def _pace(self, g: np.ndarray, dt: np.ndarray, s1: np.ndarray, s2: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per span, its pace and whether that is against its replicas: its time over theirs
        over the same calls (the same work, see ``replicas``); a group without replicas, its
        time per call. nan: its replicas' time there is not known. And its replicas' time."""
        peer, count = pooled_time(self.replicas, self.calls, g, s1, s2, self.sample) \
            if self.wide else replica_time(self.replicas, self.calls, g, s1, s2)
        by_work = count > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = dt / peer
            pace = np.where(by_work, np.where(ratio >= _LEAST_RATIO, ratio, np.nan),
                            dt / (s2 - s1))
        return pace, by_work, peer

    def _close(self, key: int, b: np.ndarray, g: np.ndarray, dt: np.ndarray, start: np.ndarray,
               s1: np.ndarray, s2: np.ndarray) -> None:
        """Write finished buckets (of kind ``key``): each group's low-quantile pace over its
        size's median, and its fastest pace among the spans wholly inside the bucket (one
        that began in the bucket before took part of its time there: the first span of a slow
        host's slow bucket is as fast as the healthy bucket before it) in which its replicas
        did not wait (a slow host waits less than they do, there)."""
        per, by_work, peer = self._pace(g, dt, s1, s2)
        known = np.isfinite(per)
        b, g, per, start, by_work = b[known], g[known], per[known], start[known], by_work[known]
        s2, calls = s2[known], (s2 - s1)[known]
        peer = np.where(by_work, peer[known], np.nan)
        if not len(b):
            return
        s1 = s1[known]
        o = np.lexsort((per, g, b))
        b, g, per, start, by_work, s1, s2, calls, peer = (
            a[o] for a in (b, g, per, start, by_work, s1, s2, calls, peer))
        head = np.flatnonzero(np.r_[True, (b[1:] != b[:-1]) | (g[1:] != g[:-1])])
        count = np.diff(np.r_[head, len(b)])
        # (the lower of the two values around the quantile: no interpolation needed here)
        value = per[head + np.floor(_Q * (count - 1)).astype(np.int64)]
        enough = count >= _MIN_PERIODS
        hb, hg, hv = b[head][enough], g[head][enough], value[enough]
        hw = by_work[head][enough]
        # the spans in which the replicas waited: their time per call far above their usual
        # one in the group's bucket
        per_call = peer / calls
        # (each bucket's and group's spans in order of time per call, unknown ones last: the
        # lower median of the known ones)
        seg = np.repeat(np.arange(len(head)), count)
        by_call = np.where(np.isfinite(per_call), per_call, np.inf)
        by_call = by_call[np.lexsort((by_call, seg))]
        valid = np.add.reduceat(np.isfinite(per_call).astype(np.int64), head)
        usual = np.where(valid > 0, by_call[head + np.maximum(valid - 1, 0) // 2], np.inf)
        with np.errstate(invalid="ignore"):
            waited = per_call > _WAITED * usual[seg]
        inside = self.cycles[key].bucket(s2) == b if key else start // self.span == b
        # (periods are sorted within a bucket and group: the first inside is the fastest)
        pos = np.where(inside & ~waited, np.arange(len(b)), len(b))
        first_in = np.minimum.reduceat(pos, head)
        fastest = np.where(first_in < np.r_[head[1:], len(b)],
                           per[np.minimum(first_in, len(b) - 1)], np.nan)
        hl = fastest[enough]
        calm = None
        if self.wide:
            hv, hl, calm = self._calm(per, per_call, head, count, enough, hv, hl)
        # a bucket's time: its first span's start (an iteration's), or its own
        first_t = np.minimum.reduceat(start, head)[enough]
        # groups judged against their replicas and groups judged by time per call are
        # compared apart (a ratio and a time)
        n_of = self.arena.n[hg] * np.where(hw, 1, -1)
        for bucket in np.unique(hb).tolist():
            t = int(first_t[hb == bucket].min()) if key else bucket * self.span
            for n in np.unique(n_of[hb == bucket]).tolist():
                sel = (hb == bucket) & (n_of == n)
                if sel.sum() < 3:
                    continue        # nothing to compare with
                self._write(int(n), t, hg[sel], hv[sel], hl[sel])
        if calm is not None and key:
            self._write_windows(key, g[calm], per[calm], start[calm], s1[calm], s2[calm])

    def _calm(self, per: np.ndarray, per_call: np.ndarray, head: np.ndarray,
              count: np.ndarray, enough: np.ndarray, value: np.ndarray, fastest: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With kept calls K apart (``wide``), per bucket and group (``head``: their first
        span, spans sorted by pace within each): the median pace of its calm spans, both as
        its value and as its fastest. A span of a few K calls nearly always holds a wait of
        somebody's (a bubble of the pipeline, a stage behind), so a low quantile of the spans
        picks those in which the group waited least, which for a slow host are those in which
        its replicas waited for it: its own slowness cancels. In the spans in which its
        replicas computed throughout, a slow host's spans take longer than theirs, each of
        them; its victims' take as long (they wait only in the other spans). Groups judged
        by time per call (no replicas) keep their values. And which spans are calm."""
        seg = np.repeat(np.arange(len(head)), count)
        known = np.isfinite(per_call)
        least = np.minimum.reduceat(np.where(known, per_call, np.inf), head)
        calm = known & (per_call <= _CALM * least[seg])
        n_calm = np.add.reduceat(calm.astype(np.int64), head)
        wider = known & (per_call <= _CALM_WIDER * least[seg])
        calm = np.where((n_calm < _MIN_CALM)[seg], wider, calm)
        n_calm = np.add.reduceat(calm.astype(np.int64), head)
        # (spans are sorted by pace within a bucket and group: the lower median of the calm)
        before = np.cumsum(calm) - calm - np.repeat(np.cumsum(n_calm) - n_calm, count)
        pick = calm & (before == (n_calm[seg] - 1) // 2)
        med = np.full(len(head), np.nan)
        med[seg[pick]] = per[pick]
        med = np.where(n_calm >= _MIN_CALM, med, np.nan)[enough]
        by_work = np.isfinite(least)[enough]
        return np.where(by_work, med, value), np.where(by_work, med, fastest), calm

    def _write_windows(self, key: int, g: np.ndarray, per: np.ndarray, start: np.ndarray,
                       s1: np.ndarray, s2: np.ndarray) -> None:
        """Write the windows of the cycle's iterations (of groups of size ``key``) that the
        calm spans ``g``, ``per``, ``start``, ``s1``, ``s2`` of a bucket begin in: per group,
        the lower median of its calm spans there over the size's median. A bucket holds a few
        iterations, and a host slow in one iteration in a few is slow in as few of its calm
        spans: the bucket's median keeps the pace of the others. A window holds about four
        kept calls of a group (``_WINDOW_KEPT``), an iteration or so. Only the spans inside one
        iteration count: one that holds the cycle's wait holds its own share of that wait,
        however calm its replicas were there."""
        if not len(g):
            return
        cycle = self.cycles[key]
        inside = (s2 - cycle.phase) // cycle.period == (s1 - cycle.phase) // cycle.period
        per_window = max(int(np.ceil(_WINDOW_KEPT * self.sample / cycle.period)), 1)
        w = (s1 - cycle.phase) // (cycle.period * per_window)
        g, per, start, w = g[inside], per[inside], start[inside], w[inside]
        if not len(g):
            return
        o = np.lexsort((per, g, w))
        w, g, per, start = w[o], g[o], per[o], start[o]
        head = np.flatnonzero(np.r_[True, (w[1:] != w[:-1]) | (g[1:] != g[:-1])])
        count = np.diff(np.r_[head, len(w)])
        enough = count >= _WINDOW_SPANS
        value = per[head + (count - 1) // 2][enough]
        hw, hg = w[head][enough], g[head][enough]
        first_t = np.minimum.reduceat(start, head)[enough]
        size = self.sizes.get(key)
        if size is None:
            size = self.sizes[key] = _Size(self.cfg.history)
        for window in np.unique(hw).tolist():
            sel = hw == window
            if sel.sum() < 3:
                continue
            med = float(np.median(value[sel]))
            if med <= 0:
                continue
            cols = [size.column(x) for x in hg[sel].tolist()]
            row = size.wpos % size.KW
            size.windows[row, :] = np.nan
            size.windows[row, cols] = value[sel] / med - 1.0
            size.wt[row] = int(first_t[sel].min())
            size.wpos += 1

    def _write(self, n: int, t: int, groups: np.ndarray, values: np.ndarray,
               fastest: np.ndarray) -> None:
        if not np.isfinite(values).any():
            return
        # (a group with too few calm spans in the bucket has none: ``_calm``)
        med = float(nanmedian(values))
        if med <= 0:
            return
        low = float(np.median(fastest[np.isfinite(fastest)])) if np.isfinite(fastest).any() \
            else np.nan
        size = self.sizes.get(n)
        if size is None:
            size = self.sizes[n] = _Size(self.cfg.history)
        row = size.pos % size.K
        cols = [size.column(g) for g in groups.tolist()]
        size.x[row, :] = np.nan
        size.x[row, cols] = values / med - 1.0
        size.low[row, :] = np.nan
        if low > 0:
            size.low[row, cols] = fastest / low - 1.0
        size.t[row] = t
        size.pos += 1

    def judge(self) -> list[SlowGroup]:
        """Groups whose pace fell behind their peers' from some bucket on, or again and
        again."""
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
                # the noise: the groups' spread at one moment, as it usually is over the ring
                # (pooled over the ring, calm stretches such as the first iterations, whose
                # buckets are cut by time, hide how far apart the groups are later)
                pooled = float(np.nan_to_num(robust_sigma(x), nan=0.0))
                at = robust_sigma(x.T, axis=1)
                spread = float(np.nan_to_num(nanmedian(at), nan=0.0))
                sigma = max(pooled, spread)
            thr = max(cfg.straggle_min_excess, cfg.slow_noise_k * sigma)
            x = _above_own_noise(x, at, thr, cfg.slow_noise_k)
            high = x > thr
            valid = ~np.isnan(x)
            rate = float(np.median(high.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)))
            p0 = np.full(len(x), min(max(rate, cfg.slow_base_rate), 0.5))
            # (with kept calls K apart, a bucket's calm spans are few: a group whose own
            # transfers are slow waits in some of them, a host behind computes slower in each)
            least_frac = _WIDE_FRAC if self.wide else _MIN_FRAC
            least_n = _WIDE_MIN_SAMPLES if self.wide else cfg.slow_min_samples
            res = on_slow_rows(change_point, CHANGE_LEAST, x, np.full(len(x), thr), p0,
                               least_n)
            ok = (res.start >= 0) & (res.logp < np.log(cfg.slow_alpha_member)) \
                & (res.pre_count >= _MIN_BEFORE) \
                & (res.frac - res.pre_frac >= cfg.slow_min_frac) & (res.frac >= least_frac) \
                & (res.median >= 2 * cfg.straggle_min_excess) \
                & (_level_share(x, res.start, res.median) >= least_frac)
            onset = _reached(x, res.start, res.median)
            for i in np.flatnonzero(ok).tolist():
                out.append(SlowGroup(size.groups[i], int(t[onset[i]]),
                                     float(res.median[i]), int(res.count[i]),
                                     float(res.frac[i]), float(res.logp[i]),
                                     every_ns=_spacing(t[onset[i]:])))
            # (with kept calls K apart a bucket spans several iterations: a host slow one
            # iteration in a few is behind in the buckets holding more of its slow iterations
            # than of its others, and there an episode must be far behind, ``_WIDE_REC_LEAST``)
            rec = self._recurring(size, self._beside_role(size, size.low[order].T), t, ok)
            taken = ok.copy()
            taken[[size.col[f.group] for f in rec]] = True
            if size.wpos:
                # (and per window of a few iterations, with kept calls K apart: see
                # ``_write_windows``)
                wo = (size.wpos + np.arange(size.KW)) % size.KW
                more = self._recurring(size, self._beside_role(size, size.windows[wo].T),
                                       size.wt[wo], taken)
                rec += more
                taken[[size.col[f.group] for f in more]] = True
            out.extend(rec)
            # no healthy past to change from: slow from the first bucket on
            unjudged = (res.start < 0) | (res.pre_count < _MIN_BEFORE)
            out.extend(self._behind_peers(size, x, t, thr, p0[0], unjudged & ~taken))
        return out

    def _recurring(self, size: _Size, x: np.ndarray, t: np.ndarray,
                   found: np.ndarray) -> list[SlowGroup]:
        """Groups whose pace falls behind their peers' again and again, normal between (a host
        slowed one iteration in three by what else it runs, a flapping power cap): the
        change-point test wants most buckets behind after the change, so an intermittent slow
        host shows as episodes instead, the buckets of its slow iterations. ``x``: per group
        and bucket, its *fastest* period over the size's median of those (with kept calls K
        apart: its calm spans' median, or per window their lower median, ``_write_windows``).
        A slow host computes every span between kept calls slower, its fastest too; its
        victims wait now and then, and when the network is slow (or a neighbour) nearly every
        span of theirs holds a wait, which moves a low quantile of their periods again and
        again, but some span between waits stays at their pace. Judged as
        ``slow.judge_rings`` judges members (``slow_rec_*``): at least ``slow_rec_episodes``
        episodes well above the noise, too many for the rate at which episodes start over the
        groups of this size (each bucket is relative to their median, so a checkpoint or a
        slower iteration of the whole job is no episode of any). ``found``: groups already
        slow from a change point on."""
        cfg = self.cfg
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            sigma = float(np.nan_to_num(robust_sigma(x), nan=0.0))
        least = _WIDE_REC_LEAST if self.wide else \
            cfg.slow_rec_min_excess * cfg.straggle_min_excess / cfg.slow_min_excess
        thr = np.full(len(x), max(least, cfg.slow_rec_noise_k * sigma))
        # a bucket in which more groups are behind than a fault or two explain (each slows
        # its own group) is an event of the job or of the network (congestion makes every
        # span of the groups behind it wait), which no host explains: it counts for none
        with np.errstate(invalid="ignore"):
            behind = (x > thr[:, None]).sum(axis=0)
        x = np.where((behind > _FAULTS_AT_ONCE)[None, :], np.nan, x)
        p0 = episode_rate(x, thr, cfg.slow_rec_base_rate)
        unit = episode_length(x, thr)
        rec = on_slow_rows(recurrence, recurrence_least(cfg.slow_rec_episodes), x, thr,
                           np.full(len(x), p0), cfg.slow_rec_episodes, unit)
        ok = (rec.start >= 0) & (rec.logp < np.log(cfg.slow_alpha_member)) \
            & (np.nan_to_num(rec.median) >= 2 * cfg.straggle_min_excess) & ~found
        out = []
        for i in np.flatnonzero(ok).tolist():
            s = int(rec.start[i])
            frac = float(rec.hits[i] / max(int(rec.count[i]), 1))
            every = _spacing(t[s:][np.isfinite(x[i, s:])])
            out.append(SlowGroup(size.groups[i], int(t[s]), float(rec.median[i]),
                                 int(rec.count[i]), frac, float(rec.logp[i]),
                                 duty=frac if frac < cfg.slow_rec_duty else None,
                                 episodes=int(rec.episodes[i]), every_ns=every))
        return out

    def _roles(self) -> dict[int, set[int]]:
        """Per rank, the other communicators (not channels) it is in."""
        by_rank: dict[int, set[int]] = {}
        for g in np.flatnonzero(~self.arena.p2p[: len(self.arena.members)]).tolist():
            for r in self.arena.members[g].tolist():
                by_rank.setdefault(r, set()).add(g)
        return by_rank

    def _role_peers(self, size: _Size) -> list[list[int]]:
        """Per column of ``size``, the columns of its peers of the same role: the groups of its
        size whose members meet its members in another communicator (the data-parallel
        replicas of its pipeline stage); kept while no group is added."""
        known = (len(size.groups), len(self.arena.members))
        if size.role_known == known:
            return size.role_peers
        by_rank = self._roles()
        col_of_rank = {r: c for c, g in enumerate(size.groups)
                       for r in self.arena.members[g].tolist()}
        out = []
        for i, g in enumerate(size.groups):
            mine = self.arena.members[g].tolist()
            meet = set().union(*(by_rank.get(r, set()) for r in mine)) - {g}
            out.append(sorted({col_of_rank[r] for h in meet for r in self.arena.members[h].tolist()
                               if r in col_of_rank} - {i}))
        size.role_peers, size.role_known = out, known
        return out

    def _beside_role(self, size: _Size, x: np.ndarray) -> np.ndarray:
        """``x`` (groups, buckets) less, per bucket, the median of each group's peers of the
        same role (where it has two at least; else as it is): what holds back a whole stage
        at once (the checkpoint its ranks write, a pipeline neighbour's wait, a slow network
        seen from that stage) is no host's own."""
        out = x.copy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for i, peers in enumerate(self._role_peers(size)):
                if len(peers) >= 2:
                    out[i] = x[i] - np.nan_to_num(nanmedian(x[peers], axis=0), nan=np.nan)
        return out

    def _behind_peers(self, size: _Size, x: np.ndarray, t: np.ndarray, thr: float,
                      p0: float, cand: np.ndarray) -> list[SlowGroup]:
        """Groups behind the peers of their role in most buckets since the first: a host
        already slow when recording began. Groups differ in pace by role (a pipeline stage with
        the loss), so a group is compared, bucket by bucket, with the median of its peers of the
        same role: the groups of its size whose members meet its members in another
        communicator (the data-parallel replicas of its stage). Without peers, it is not
        judged."""
        cfg = self.cfg
        valid = ~np.isnan(x)
        n_valid = valid.sum(axis=1)
        above = (np.nan_to_num(x, nan=-np.inf) > thr).sum(axis=1)
        cand = cand & (n_valid >= cfg.slow_min_samples) & (above >= _MIN_FRAC * n_valid)
        if not cand.any():
            return []
        role_peers = self._role_peers(size)
        out = []
        for i in np.flatnonzero(cand).tolist():
            g = size.groups[i]
            peers = role_peers[i]
            if not peers:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                role = nanmedian(x[peers], axis=0)
            y = x[i] - role
            ok = ~np.isnan(y)
            m = int(ok.sum())
            if m < cfg.slow_min_samples:
                continue
            k = int((y[ok] > thr).sum())
            logp = float(binom_logsf(np.array([k]), np.array([m]), np.array([p0]))[0])
            med = float(np.median(y[ok]))
            # (and at about one level throughout, its first bucket too, as a host slow all
            # along is: a group that turned slow a few buckets after its first, a sample or
            # two just above the noise before, is judged by its change)
            if k < _MIN_FRAC * m or logp >= np.log(cfg.slow_alpha_member) \
                    or med < 2 * cfg.straggle_min_excess \
                    or (y[ok] >= 0.5 * med).sum() < _MIN_FRAC * m or y[ok][0] < 0.5 * med:
                continue
            first = int(np.flatnonzero(ok)[0])
            out.append(SlowGroup(g, int(t[first]), med, m, k / m, logp))
        return out
