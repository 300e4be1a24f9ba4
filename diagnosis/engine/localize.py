"""Communication faults: which connections or communicators are slow or stuck, and which
components (NIC, link, switch; ranks when no topology is known) explain them."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np

from c4.report import Suspect
from diagnosis.engine import peers
from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.distinct import distinct
from diagnosis.engine.placement import Placement
from diagnosis.engine.series import (
    CHANGE_LEAST,
    ChangePoint,
    SeriesBank,
    change_point,
    episode_length,
    episode_marks,
    episode_rate,
    even_spread,
    excess_sigma,
    on_slow_rows,
    recurrence,
    recurrence_least,
    row_quantile,
)
from diagnosis.engine.tomography import (
    KIND_ORDER,
    Component,
    Explanation,
    PathCache,
    explain,
)

_EMPTY: frozenset[Component] = frozenset()
#: odds against a component that count as evidence (Jeffreys: strong)
_DECISIVE = 20.0
#: how a communication hang was "localized" when nothing places it: the components that
#: explain it equally lie on different paths between its members (every member's NIC, in
#: which case the stuck transfer may as well sit in a member's transport; the uplinks and
#: spines of every ECMP route between its leaves); naming the first of such a tie would single
#: out a component at random
UNPLACED = ("the components that explain it equally lie on different paths between its "
            "members and nothing through them moved: without per-connection records the stuck "
            "transfer cannot be placed")


@dataclass
class CommFinding:
    explanation: Explanation
    onset_ns: int
    slowdown: float            # median duration / baseline of the explained observations
    observations: list[str]    # names of the explained observations
    healthy: int               # healthy observations considered
    via: str                   # "connections" or "communicators"
    ends: list[frozenset[int]] = field(default_factory=list)  # ranks of each explained one
    sure: bool = True          # its components lie on every candidate path of what it explains
    against: str = "their baseline"   # what the slowdown is measured against
    # slow again and again rather than all along: the fraction of the explained observations'
    # samples that were slow since their first episode, and the episodes (median over them)
    duty: float | None = None
    episodes: int = 0
    # its equally explaining components lie on one candidate path between two members of what
    # it explains; else nothing says which of them it is, and naming one would be a guess
    placed: bool = True


#: a connection with this share of its samples slow since a fault's onset is slow in part
_SLOW_IN_PART = 0.15
#: past this many series, the fleet's rates are taken over an even spread of this many (see
#: ``Localizer._slow_series``)
_POOL = 1 << 17
#: connections new or rerouted indexed at each judgement of the connections (about 10 us each)
_SYNC_PER_PASS = 1 << 16
#: ... and at most about this long: a large fabric's first connections each walk the paths of
#: a new pair of switches (a share took 1-4 s at 524,288 connections on a rail fabric). Not
#: less: a slow connection makes the localizer index every one left at once
_SYNC_SECONDS = 1.0


def _share_above(ring: np.ndarray, start: np.ndarray, thr: float) -> np.ndarray:
    """Per row, the share of its samples from ``start`` on (none before it: -1) above ``thr``."""
    col = np.arange(ring.shape[1])[None, :]
    since = (col >= start[:, None]) & (start[:, None] >= 0) & np.isfinite(ring)
    with np.errstate(invalid="ignore"):
        above = (since & (ring > thr)).sum(axis=1)
    return above / np.maximum(since.sum(axis=1), 1)


@dataclass
class SlowSeries:
    """What ``Localizer._slow_series`` found of ``n`` keys. Per row (the keys it judged, at
    positions ``rows`` of its keys): the samples oldest first and their times, the change
    points, whether slow, and for those slow again and again the fraction of their samples
    since their first episode and the episodes (``duty`` NaN when not recurring)."""

    n: int
    rows: np.ndarray
    ring: np.ndarray
    rt: np.ndarray
    thr: float
    res: ChangePoint
    slow: np.ndarray
    duty: np.ndarray
    episodes: np.ndarray
    rec_thr: float       # a sample above it counts towards an episode
    unit: float          # how many samples a benign episode lasts
    pool_ring: np.ndarray    # the rings the fleet's rates came from
    pool_rt: np.ndarray

    def full(self, values: np.ndarray, fill: object) -> np.ndarray:
        """Per-row ``values`` spread over all ``n`` keys, ``fill`` at the keys not judged."""
        out = np.full(self.n, fill, dtype=values.dtype)
        out[self.rows] = values
        return out

    def split(self, bank: SeriesBank, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`split_at_onset` over all ``keys`` (the same ones, in the same order): a key
        not judged could not be slow, nor slow in part (fewer than two samples above the
        recurrence threshold), and is healthy when most of its samples since the onset are
        normal, two at least."""
        onset, healthy = split_at_onset(self.ring, self.rt, self.thr, self.res, self.slow,
                                        np.full(len(self.rows), self.rec_thr))
        if len(self.rows) == self.n:
            return onset, healthy
        n_post, n_above = bank.counts(keys, self.thr, since=int(onset.min()))
        all_healthy = (n_post >= 2) & (2 * (n_post - n_above) > n_post)
        all_healthy[self.rows] = healthy
        return self.full(onset, np.iinfo(np.int64).max), all_healthy


def split_at_onset(ring: np.ndarray, rt: np.ndarray, thr: float, res: ChangePoint,
                   slow: np.ndarray, rec_thr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per key: when it turned slow (the latest time for those that did not), and whether
    it stayed healthy since the earliest onset: most of its samples normal, and not slow
    in part, two samples or ``_SLOW_IN_PART`` of them above ``rec_thr`` (per key: what
    counts towards recurring). A connection slow on one iteration in three, too seldom to
    shift its median and not yet judged recurring itself, is no evidence that what it
    crosses is sound."""
    rows = np.arange(len(ring))
    onset = np.where(slow, rt[rows, np.maximum(res.start, 0)], np.iinfo(np.int64).max)
    t0 = int(onset.min())
    post = np.where((rt >= t0) & np.isfinite(ring), ring, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        post_med = row_quantile(post, 0.5)
    n_post = np.isfinite(post).sum(axis=1)
    n_rec = (post > rec_thr[:, None]).sum(axis=1)                  # (NaN compares False)
    in_part = n_rec >= np.maximum(2, _SLOW_IN_PART * n_post)
    healthy = ~slow & (n_post >= 2) & (post_med < thr) & ~in_part
    return onset, healthy


class Localizer:
    def __init__(self, arena: Arena, placement: Placement, paths: PathCache | None,
                 config: EngineConfig) -> None:
        self.arena, self.placement, self.paths, self.cfg = arena, placement, paths, config
        self._key_cache: dict[int, tuple[object, tuple[frozenset[Component],
                                                        frozenset[Component]]]] = {}
        self._index: dict[Component, set[int]] = {}
        self._index_arrays: dict[Component, np.ndarray] = {}
        self.load: peers.LoadModel | None = None
        # what the connections were last found in, and the state of what it was found from
        self._conns_judged: tuple[tuple[int, ...], list[CommFinding]] | None = None

    def set_paths(self, paths: PathCache | None, win: ConnWindow) -> None:
        """Name components on another topology from now on: every connection's components
        are worked out again at the next sync."""
        self.paths = paths
        self._key_cache.clear()
        self._index.clear()
        self._index_arrays.clear()
        win.changed.extend(range(len(win)))

    # ----- observation -> components ----------------------------------------------------------
    def pair(self, src: int, dst: int, path: tuple[str, ...] | None = None
             ) -> tuple[frozenset[Component], frozenset[Component]]:
        """(may, must) components of traffic from rank ``src`` to rank ``dst``."""
        if self.paths is None:
            ranks = frozenset({Component("rank", str(src)), Component("rank", str(dst))})
            return ranks, ranks
        if path:
            comps = self.paths.recorded(path)
            return comps, comps
        ha, hb = self.placement.host(src), self.placement.host(dst)
        if ha is not None and ha == hb:
            return _EMPTY, _EMPTY        # inside a host (NVLink, shared memory): no network
        a, b = self.placement.nic(src), self.placement.nic(dst)
        if a is None or b is None:
            return _EMPTY, _EMPTY
        return self.paths.between(a, b)

    def _ring_pairs(self, g: int) -> list[tuple[int, int]]:
        """The (sender, receiver) ranks whose traffic stands for communicator ``g``'s."""
        m = self.arena.members[g].tolist()
        return [(m[0], m[1])] if self.arena.p2p[g] else \
            [(m[i], m[(i + 1) % len(m)]) for i in range(len(m))] if len(m) > 1 else []

    def group_sets(self, g: int) -> tuple[frozenset[Component], frozenset[Component]]:
        may: set[Component] = set()
        must: set[Component] = set()
        for s, d in self._ring_pairs(g):
            a, b = self.pair(s, d)
            may |= a
            must |= b
        return frozenset(may), frozenset(must)

    def _sync(self, win: ConnWindow, most: int | None = None,
              seconds: float | None = None) -> None:
        """Keep the inverted index component -> connection keys surely crossing it: every
        key new or rerouted since, or the ``most`` first of them, as many as ``seconds``
        allow (see ``comm_slow``)."""
        if not win.changed:
            return
        todo = win.changed if most is None else win.changed[:most]
        deadline = None if seconds is None else time.perf_counter() + seconds
        seen: set[int] = set()
        n = 0
        for n, k in enumerate(todo, 1):
            if k in seen:
                continue
            seen.add(k)
            old = self._key_cache.get(k)
            if old is not None:
                for c in old[1][1]:
                    self._index.get(c, set()).discard(k)
            for c in self.key_sets(win, k)[1]:
                self._index.setdefault(c, set()).add(k)
            if deadline is not None and not n % 1024 and time.perf_counter() > deadline:
                break
        del win.changed[:n]
        self._index_arrays.clear()

    def clearing(self, win: ConnWindow, healthy: np.ndarray) -> Callable[[Component], int]:
        """Count of healthy connections surely crossing a component (``healthy`` per key)."""
        self._sync(win)

        def count(c: Component) -> int:
            arr = self._index_arrays.get(c)
            if arr is None:
                arr = self._index_arrays[c] = np.fromiter(self._index.get(c, ()), dtype=np.int64)
            arr = arr[arr < len(healthy)]
            return int(healthy[arr].sum())
        return count

    def key_sets(self, win: ConnWindow, k: int
                 ) -> tuple[frozenset[Component], frozenset[Component]]:
        """(may, must) of connection key ``k``, cached while its recorded path stays."""
        path = win.path[k]
        hit = self._key_cache.get(k)
        if hit is not None and hit[0] is path:
            return hit[1]
        sets = self.pair(int(win.src[k]), int(win.dst[k]), path)
        self._key_cache[k] = (path, sets)
        return sets

    # ----- slow ------------------------------------------------------------------------------
    def _slow_series(self, bank: SeriesBank, keys: np.ndarray, min_span: int, min_before: int,
                     rec_excess: float | None = None) -> SlowSeries:
        """Which keys turned slow: a binomial change point on samples above the noise, against
        the base rate of such samples over every key; or slow again and again (see
        ``_recurring``). Past ``_POOL`` keys the rates are taken over an even spread of that
        many, and only the keys that could be slow are read in time order and judged: those
        with as many samples above the noise as a change point is judged slow on (see
        ``_change_least``), with two above the recurrence threshold (what recurring and
        "slow in part" count), and those judged slow before (at a million connections,
        reading every ring in order took seconds a pass; and as rings fill, two samples
        above the noise in 64 became common by chance: 47k of 524k connections)."""
        cfg = self.cfg
        n = len(keys)
        pool = even_spread(keys, _POOL)
        p_ring, p_rt = bank.ordered(pool)
        p_valid = np.isfinite(p_ring)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            sigma = float(np.nan_to_num(excess_sigma(p_ring[p_valid]), nan=0.0))
        thr = max(cfg.comm_min_excess / 2, cfg.comm_noise_k * sigma)
        pooled = float((p_ring > thr).sum() / max(int(p_valid.sum()), 1))
        least = cfg.comm_rec_min_excess if rec_excess is None else rec_excess
        rec_thr = max(least, cfg.comm_rec_noise_k * sigma)
        if n <= _POOL:
            rows, ring, rt = np.arange(n), p_ring, p_rt
        else:
            _, n_above = bank.counts(keys, thr)
            _, n_rec = bank.counts(keys, rec_thr)
            rows = np.flatnonzero((n_above >= self._change_least()) | (n_rec >= 2)
                                  | (bank.slow_since[keys] >= 0))
            ring, rt = bank.ordered(keys[rows])
        valid = np.isfinite(ring)
        high = ring > thr                                   # (NaN compares False)
        n_high = high.sum(axis=1)
        p0 = np.full(len(rows), pooled)
        # each key is judged against its own healthy rate when its oldest third of samples
        # tells it: a fault that slows (nearly) every connection (the one switch of a small
        # fabric) raises the pooled rate, and a transfer that often shares its NIC with other
        # traffic (a pipeline send beside the data-parallel all-reduce) is slow in a good share
        # of its samples all along (only rows with two slow samples or more, the least a
        # change point starts on, need it)
        own_rows = np.flatnonzero(n_high >= 2)
        if len(own_rows):
            v, h = valid[own_rows], high[own_rows]
            seen = np.cumsum(v, axis=1)
            early = v & (seen <= np.maximum(seen[:, -1] // 3, 1)[:, None])
            n_early = early.sum(axis=1)
            own = (h & early).sum(axis=1) / np.maximum(n_early, 1)
            p0[own_rows] = np.where(n_early >= cfg.comm_min_samples, own, pooled)
        p0 = np.clip(p0, cfg.slow_base_rate, 0.5)
        res = on_slow_rows(change_point, CHANGE_LEAST, ring, np.full(len(rows), thr), p0,
                           cfg.comm_min_samples)
        slow = (res.start >= 0) & (res.logp < np.log(cfg.comm_alpha)) \
            & (res.frac - res.pre_frac >= cfg.comm_min_frac) \
            & (res.median >= cfg.comm_min_excess) & (res.effect >= cfg.comm_min_excess)
        lasting = self._lasting(bank, keys[rows], ring, rt, high, thr, res, slow, min_span,
                                min_before)
        res, lasting, duty, episodes, unit = self._recurring(ring, rt, rec_thr, res, lasting,
                                                             p_ring, p_rt, thr)
        return SlowSeries(n, rows, ring, rt, thr, res, lasting, duty, episodes, rec_thr, unit,
                          p_ring, p_rt)

    def _change_least(self) -> int:
        """The fewest samples above the noise a key judged slow from a change point has: its
        segment is ``comm_min_samples`` long at least, ``comm_min_frac`` of it above."""
        cfg = self.cfg
        return max(CHANGE_LEAST, math.ceil(cfg.comm_min_frac * cfg.comm_min_samples - 1e-9))

    def _recurring(self, ring: np.ndarray, rt: np.ndarray, thr: float, res: ChangePoint,
                   lasting: np.ndarray, p_ring: np.ndarray, p_rt: np.ndarray,
                   change_thr: float
                   ) -> tuple[ChangePoint, np.ndarray, np.ndarray, np.ndarray, float]:
        """Keys slow again and again with healthy stretches between (a flapping port, pause
        frames, a marginal cable: slow on one iteration in three, or at random): at least
        ``comm_rec_episodes`` episodes of samples above ``thr`` (per key), too many for the
        fleet's rate of such episodes (a transient congestion is one episode, and rarely
        strikes one path three times). Returns the change points with those keys' segments
        (from their first counted episode), the slow keys, and per key the fraction of its
        samples that were slow since then (NaN: not recurring) and its episodes, and how
        many samples a benign episode lasts (see ``episode_length``). The fleet's rates come
        from the pool's rings, ``p_ring`` and ``p_rt`` (see ``_slow_series``);
        ``change_thr``: the change-point test's threshold, above which a sample is not
        normal."""
        cfg = self.cfg
        duty = np.full(len(ring), np.nan)
        episodes = np.zeros(len(ring), dtype=np.int64)
        if not len(ring):
            return res, lasting, duty, episodes, 0.0
        p_thr = np.full(len(p_ring), thr)
        common = self._job_wide(p_ring, p_rt, p_thr)
        marks = episode_marks(p_ring, p_thr)
        p0 = episode_rate(p_ring, p_thr, cfg.comm_rec_base_rate, common=common, marks=marks)
        unit = episode_length(p_ring, p_thr, marks=marks)
        rec = on_slow_rows(recurrence, recurrence_least(cfg.comm_rec_episodes), ring,
                           np.full(len(ring), thr), np.full(len(ring), p0),
                           cfg.comm_rec_episodes, unit)
        recurs = (rec.start >= 0) & (rec.logp < np.log(cfg.comm_alpha))
        # slow from a change point on and recurring, most samples since normal: described as
        # recurring (its slow samples are episodes, not a new level). Normal is below the
        # change point's threshold: a connection slowed by a seventh all along has samples
        # on both sides of the (higher) recurrence threshold, episodes of nothing
        again = recurs & lasting & (rec.hits < cfg.comm_rec_duty * np.maximum(rec.count, 1)) \
            & (_share_above(ring, rec.start, change_thr) < cfg.comm_rec_duty)
        duty[again] = rec.hits[again] / np.maximum(rec.count[again], 1)
        episodes[again] = rec.episodes[again]
        new = recurs & ~lasting
        if not new.any():
            return res, lasting, duty, episodes, unit
        res = ChangePoint(*(np.array(getattr(res, f.name)) for f in fields(res)))
        res.start[new] = rec.start[new]
        res.logp[new] = rec.logp[new]
        res.count[new] = rec.count[new]
        res.frac[new] = rec.hits[new] / np.maximum(rec.count[new], 1)
        res.median[new] = rec.median[new]
        duty[new] = res.frac[new]
        episodes[new] = rec.episodes[new]
        return res, lasting | new, duty, episodes, unit

    @staticmethod
    def _round_ns(ring: np.ndarray, rt: np.ndarray) -> float:
        """A round of the job as the series see it: the usual longest gap between a key's
        samples (its median over keys; 0 when unknown)."""
        valid = np.isfinite(ring)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            gaps = np.where(valid[:, 1:] & valid[:, :-1], np.diff(rt, axis=1), np.nan)
            # one sort for all keys: numpy's NaN-aware percentile loops over the rows
            per_key = row_quantile(gaps, 0.75) if gaps.shape[1] else np.zeros(0)
        per_key = per_key[np.isfinite(per_key)]
        return float(np.median(per_key)) if len(per_key) else 0.0

    def _job_wide(self, ring: np.ndarray, rt: np.ndarray, thr: np.ndarray) -> np.ndarray:
        """Per sample: whether it fell in a round in which at least half of the keys with a
        sample then were above ``thr`` (per key), ``comm_peer_min`` of them at least."""
        out = np.zeros(ring.shape, dtype=bool)
        width = self._round_ns(ring, rt)
        valid = np.isfinite(ring)
        if width <= 0 or not valid.any():
            return out
        b = rt // int(max(width, 1))
        b = b - b[valid].min()
        n_keys = len(ring)
        # (round, key) pairs as one integer: a 1-D unique instead of a far slower axis=1 one
        pair = b * n_keys + np.arange(n_keys)[:, None]
        high = valid & (ring > np.asarray(thr)[:, None])
        seen = distinct(pair[valid]) // n_keys
        hot = distinct(pair[high]) // n_keys
        bins, n_seen = np.unique(seen, return_counts=True)
        n_hot = np.zeros(len(bins))
        if len(hot):
            hb, hc = np.unique(hot, return_counts=True)
            n_hot[np.searchsorted(bins, hb)] = hc
        wide = bins[(n_hot >= 0.5 * n_seen) & (n_seen >= self.cfg.comm_peer_min)]
        return valid & np.isin(b, wide)

    def _lasting(self, bank: SeriesBank, keys: np.ndarray, ring: np.ndarray, rt: np.ndarray,
                 high: np.ndarray, thr: float, res: ChangePoint, slow: np.ndarray,
                 min_span: int, min_before: int) -> np.ndarray:
        """Of the keys that turned slow, those whose slow samples spread over ``min_span`` (ns)
        since they were first judged slow: a transient congestion passes, a faulty component
        stays.

        A key is first judged slow only on a change seen within its own judged samples
        (``min_before`` of them before the split). Without them the "change" is from the
        samples its baseline was learnt on, the job's first calls: warm-up iterations, which
        run at another pace (fewer transfers contend while compute is slow), shift every later
        sample alike. Once judged slow it stays so, whatever one pass's test says, until its
        newest samples are back below the noise (as a fault lasts, its older samples turn slow
        too and its own healthy rate is no longer in view)."""
        before = bank.slow_since[keys].copy()
        held = np.flatnonzero(before >= 0)
        if len(held):
            valid = np.isfinite(ring[held])
            seen = np.cumsum(valid, axis=1)
            newest = valid & (seen > (2 * seen[:, -1] // 3)[:, None])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                recent = row_quantile(np.where(newest, ring[held], np.nan), 0.5)
            before[held[~(recent > thr)]] = -1
        slow = slow & ((res.pre_count >= min_before) | (before >= 0))
        since = before.copy()
        rows = np.flatnonzero(slow)
        out = np.zeros(len(keys), dtype=bool)
        if len(rows):
            onset = rt[rows, res.start[rows]]
            since[rows] = np.where(before[rows] >= 0, np.minimum(before[rows], onset), onset)
            after = np.arange(rt.shape[1])[None, :] >= res.start[rows, None]
            last = np.where(after & high[rows], rt[rows], np.iinfo(np.int64).min).max(axis=1)
            out[rows] = last - since[rows] >= min_span
        bank.slow_since[keys] = since
        return out

    def comm_slow(self, win: ConnWindow | None, timing_bank: SeriesBank,
                  key_group: list[int], min_span: int) -> list[CommFinding]:
        """Slow components; a slowdown counts once it has lasted ``min_span`` (ns)."""
        if win is not None and len(win) and len(win.bank):
            # the verdict depends on the connections' samples and paths and on where ranks
            # run: unchanged, it stands (a job's linkstat come once per window, which may be
            # 16 s, and the slow detectors run twice per window; at 1M connections one
            # judgement takes seconds). ``min_span`` follows the job's iteration time, a
            # moving median: a change of it alone waits for the next samples.
            state = self._conns_state(win)
            if self._conns_judged is None or self._conns_judged[0] != state:
                # the index of what each connection crosses is read only once one is slow,
                # but built as connections come, a share at each judgement: at half a million
                # connections building it at once stalled the detectors for seconds
                self._sync(win, _SYNC_PER_PASS, _SYNC_SECONDS)
                self._conns_judged = (state, self._comm_slow_conns(win, min_span)
                                      + self._comm_slow_peers(win))
            return list(self._conns_judged[1])
        return self._comm_slow_groups(timing_bank, key_group, min_span)

    def conns_stale(self, win: ConnWindow | None) -> bool:
        """Whether ``comm_slow`` would judge the connections afresh (their samples, paths or
        the ranks' places changed since it last did)."""
        if win is None or not len(win) or not len(win.bank):
            return False
        return self._conns_judged is None or self._conns_judged[0] != self._conns_state(win)

    def _conns_state(self, win: ConnWindow) -> tuple[int, ...]:
        return (win.total, win.path_version, len(win), len(win.bank), id(self.paths),
                self.placement.version)

    def _comm_slow_peers(self, win: ConnWindow) -> list[CommFinding]:
        """Components whose connections were slow from their first transfer on, against their
        peers carrying the same load (:mod:`diagnosis.engine.peers`). A component is named
        when at least ``comm_peer_route_purity`` of the judged connections through it are (with
        their paths recorded; without, a NIC or cable only, when all of them are: a connection
        slow beyond its NICs' load may have hashed onto a busy uplink), and more than one, or
        one slow beyond ``comm_peer_single`` (one flow alone on a slow uplink)."""
        if self.load is None and self.paths is not None:
            self.load = peers.LoadModel(self.paths.topo)
        verdict = peers.judge(win, self.cfg, self.load, self.placement.nic)
        short = self._short_of_capacity(win, verdict)
        if not verdict.slow.any():
            return short
        healthy = np.zeros(len(win), dtype=bool)
        healthy[verdict.keys[~verdict.slow]] = True
        found, keys = peers.explain_peers(win, verdict, self.key_sets, self.placement.nic,
                                          self.cfg.comm_peer_route_purity,
                                          self.cfg.comm_peer_purity,
                                          self.clearing(win, healthy))
        ratio = dict(zip(verdict.keys.tolist(), verdict.ratio.tolist()))
        single = 1.0 + self.cfg.comm_peer_single
        found = [e for e in found if len(e.explained) >= 2
                 or ratio[int(keys[e.explained[0]])] >= single]
        if not found:
            return short
        names = [f"{win.src[k]}>{win.dst[k]}" for k in keys]
        ends = [frozenset((int(win.src[k]), int(win.dst[k]))) for k in keys]
        out = []
        for e in found:
            ks = keys[e.explained]
            out.append(CommFinding(e, win.first_ns, float(np.median([ratio[int(k)] for k in ks])),
                                   [names[i] for i in e.explained], int((~verdict.slow).sum()),
                                   "connections", [ends[i] for i in e.explained],
                                   against="their peers carrying the same load (slow since the "
                                   "recording began)"))
        return out + short

    def _short_of_capacity(self, win: ConnWindow, verdict: peers.PeerVerdict
                           ) -> list[CommFinding]:
        """The component that every connection short of its path's capacity surely crosses,
        where even the best connections of their size are (:func:`peers.judge`): with no
        peers to compare, only the rate the links are built for tells the slow switch of a
        job that has one switch. Named when at least ``comm_peer_route_purity`` of the judged
        connections through it are short, ``comm_peer_min`` at least; those slow against
        peers are left to them."""
        pick = verdict.short & ~verdict.slow
        if int(pick.sum()) < self.cfg.comm_peer_min:
            return []
        keys = verdict.keys[pick]
        common = frozenset.intersection(*(self.key_sets(win, int(k))[1]
                                          for k in keys.tolist()))
        if not common:
            return []
        healthy = np.zeros(len(win), dtype=bool)
        healthy[verdict.keys[np.isfinite(verdict.cap_ratio) & ~verdict.short]] = True
        clearing = self.clearing(win, healthy)
        cleared = max(clearing(c) for c in common)
        if len(keys) < self.cfg.comm_peer_route_purity * (len(keys) + cleared):
            return []
        order = sorted(common, key=lambda c: (KIND_ORDER.get(c.type, 9), c.id))
        e = Explanation(order, list(range(len(keys))), cleared, float(len(keys)))
        return [CommFinding(e, win.first_ns, float(np.median(verdict.cap_ratio[pick])),
                            [f"{win.src[k]}>{win.dst[k]}" for k in keys],
                            int(healthy.sum()), "connections",
                            [frozenset((int(win.src[k]), int(win.dst[k]))) for k in keys],
                            against="the capacity of the links they cross allows (all "
                            "connections of their size are as slow, so no peer can be "
                            "compared: the component they all cross, or link capacities in the "
                            "topology above what the fabric delivers)")]

    def _comm_slow_conns(self, win: ConnWindow, min_span: int) -> list[CommFinding]:
        keys = np.arange(min(len(win), len(win.bank)))
        ss = self._slow_series(win.bank, keys, min_span, self.cfg.comm_min_before)
        if not ss.slow.any():
            return []
        onset, healthy = ss.split(win.bank, keys)
        duty, episodes = ss.full(ss.duty, np.nan), ss.full(ss.episodes, 0)
        slow_idx = ss.rows[ss.slow]
        sets = [self.key_sets(win, int(k)) for k in slow_idx]
        ok = [i for i, (may, _) in enumerate(sets) if may]
        slow_idx = slow_idx[ok]
        sets = [sets[i] for i in ok]
        found, _ = explain([may for may, _ in sets], [], self.cfg.comm_purity,
                           clearing=self.clearing(win, healthy))
        found = [e for e in found
                 if self._recurs_together(e, slow_idx, win.bank, keys, ss, duty)]
        names = [f"{win.src[k]}>{win.dst[k]}" for k in slow_idx]
        ends = [frozenset((int(win.src[k]), int(win.dst[k]))) for k in slow_idx]
        median = ss.full(ss.res.median, np.nan)
        return [self._finding(e, slow_idx, names, onset, median, int(healthy.sum()),
                              "connections", ends, [must for _, must in sets],
                              (duty, episodes))
                for e in found]

    def _recurs_together(self, e: Explanation, slow_idx: np.ndarray, bank: SeriesBank,
                         keys: np.ndarray, ss: SlowSeries, duty: np.ndarray) -> bool:
        """Whether an explanation of connections that are slow again and again holds at each
        episode: a faulty component slows (nearly) every connection across it each time,
        while transient congestion of different links along one connection's path makes that
        connection slow again and again with the others through each link healthy. Counts
        the component's episodes (slow samples of its connections, clustered in time a round
        apart), keeping those where at least ``comm_purity`` of its connections with a sample
        then were slow, and wants ``comm_rec_episodes`` of them. Explanations of connections
        slow all along pass. ``keys``: the connection keys judged (all of them, in order);
        ``duty`` per key."""
        thr, unit = ss.rec_thr, ss.unit
        explained = slow_idx[e.explained]
        if not np.isfinite(duty[explained]).sum() * 2 > len(explained):
            return True
        ks = set(explained.tolist())
        for c in e.components:
            ks |= {k for k in self._index.get(c, ()) if k < len(keys)}
        mine = np.fromiter(sorted(ks), dtype=np.int64)
        r, t = bank.ordered(keys[mine])
        valid = np.isfinite(r)
        width = self._round_ns(r, t)
        if width <= 0:
            return True
        # an episode in which most of the job was slow counts only for a component that most
        # of the job's connections cross (the one switch of a small fabric): else it was an
        # event of the whole job, which no component of a few explains
        judged = int((bank.pos[keys] > 0).sum())
        wide_ok = len(mine) >= 0.5 * max(judged, 1)
        hk, hc = np.nonzero(valid & (r > thr))
        if not len(hk):
            return False
        when = t[hk, hc]
        order = np.argsort(when)
        when = when[order]
        cut = np.flatnonzero(np.diff(when) > width / 2) + 1
        episodes = 0
        weighed = 0.0
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(when)]):
            a, b = when[lo] - width / 2, when[hi - 1] + width / 2
            inside = valid & (t >= a) & (t <= b)
            seen = inside.any(axis=1)
            slow = (inside & (r > thr)).any(axis=1)
            if not seen.sum() or slow.sum() < self.cfg.comm_purity * seen.sum():
                continue
            if not wide_ok:
                # (over the pool the fleet's rates came from: all keys, or an even spread)
                p_ring, p_rt = ss.pool_ring, ss.pool_rt
                every = np.isfinite(p_ring) & (p_rt >= a) & (p_rt <= b)
                n_seen = int(every.any(axis=1).sum())
                n_slow = int((every & (p_ring > thr)).any(axis=1).sum())
                if n_seen >= self.cfg.comm_peer_min and n_slow >= 0.5 * n_seen:
                    continue
            # an episode several times as long as a benign one weighs as many
            run = float(np.median((inside & (r > thr)).sum(axis=1)[slow]))
            episodes += 1
            weighed += max(1.0, np.floor(run / unit)) if unit > 0 else 1.0
        return episodes >= min(2, self.cfg.comm_rec_episodes) \
            and weighed >= self.cfg.comm_rec_episodes

    def _comm_slow_groups(self, bank: SeriesBank, key_group: list[int],
                          min_span: int) -> list[CommFinding]:
        """Communicators whose transfers turned slow, as observations over their ring pairs."""
        K = min(len(key_group), len(bank))
        if K == 0:
            return []
        # a communicator's transfer time, from its members' calls on their own clocks, moves
        # by their offsets whenever another member enters last: only gross episodes count
        keys = np.arange(K)
        ss = self._slow_series(bank, keys, min_span, self.cfg.comm_min_samples,
                               self.cfg.comm_rec_min_excess_calls)
        if not ss.slow.any():
            return []
        onset, healthy = ss.split(bank, keys)
        slow = ss.full(ss.slow, False)
        median = ss.full(ss.res.median, np.nan)
        duty, episodes = ss.full(ss.duty, np.nan), ss.full(ss.episodes, 0)
        groups = np.asarray(key_group[:K], dtype=np.int64)
        # a communicator is slow if any of its operations is, healthy if all judged ones are
        slow_g = sorted({int(g) for g in groups[slow] if self.group_sets(int(g))[0]})
        if not slow_g:
            return []
        bad = set(groups[slow].tolist())
        healthy_g = sorted({int(g) for g in groups[healthy]} - bad)
        first: dict[int, int] = {}
        for k in np.flatnonzero(slow).tolist():
            g = int(groups[k])
            first[g] = min(first.get(g, np.iinfo(np.int64).max), int(onset[k]))
        obs = [self.group_sets(g)[0] for g in slow_g]
        clear = [self.group_sets(g)[1] for g in healthy_g]
        found, _ = explain(obs, clear, self.cfg.comm_purity, exclusive=True)
        idx = np.arange(len(slow_g))
        g_onset = np.array([first[g] for g in slow_g], dtype=np.int64)
        g_med = np.array([float(np.nanmax(median[groups == g])) for g in slow_g])
        # a communicator recurs when its slow operations do (the most slow of them)
        on = slow & np.isfinite(duty)
        g_duty = np.array([float(np.max(duty[on & (groups == g)], initial=np.nan))
                           if (on & (groups == g)).any() else np.nan for g in slow_g])
        g_eps = np.array([int(episodes[groups == g].max()) for g in slow_g])
        names = [self.arena.names[g] for g in slow_g]
        members = [frozenset(self.arena.members[g].tolist()) for g in slow_g]
        must = [self.group_sets(g)[1] for g in slow_g]
        out = []
        for e in found:
            f = self._finding(e, idx, names, g_onset, g_med, len(clear), "communicators",
                              members, must, (g_duty, g_eps))
            # as for a hang (``_on_one_path``): components that explain the slowdown equally
            # on different routes (the spines of every ECMP route between two leaves) do not
            # place it
            f.placed = self._on_one_path(e, [slow_g[i] for i in e.explained],
                                         frozenset().union(*[must[i] for i in e.explained]))
            out.append(f)
        return out

    def _finding(self, e: Explanation, idx: np.ndarray, names: list[str], onset: np.ndarray,
                 median: np.ndarray, healthy: int, via: str, ends: list[frozenset[int]],
                 must: list[frozenset[Component]],
                 rec: tuple[np.ndarray, np.ndarray] | None = None) -> CommFinding:
        keys = idx[e.explained]
        # recurring when most of the explained observations recur rather than stay slow
        duty: float | None = None
        episodes = 0
        if rec is not None:
            d = rec[0][keys]
            if np.isfinite(d).sum() * 2 > len(d):
                duty = float(np.nanmedian(d))
                episodes = int(np.median(rec[1][keys][np.isfinite(d)]))
            if duty is not None and duty >= self.cfg.comm_rec_duty:
                duty = None      # slow in most samples since: slow all along, a few dips
        # the onset most of the explained observations agree on (a single early change point
        # may be noise, or a call that straddled the onset)
        return CommFinding(e, int(np.percentile(onset[keys], 50, method="higher")),
                           1.0 + float(np.median(median[keys])),
                           [names[i] for i in e.explained], healthy, via,
                           [ends[i] for i in e.explained],
                           any(all(c in must[i] for i in e.explained) for c in e.components),
                           duty=duty, episodes=episodes)

    def _last_alive(self, win: ConnWindow) -> dict[Component, int]:
        """The last time a transfer surely crossing each component finished (known to a
        window only: its middle)."""
        out: dict[Component, int] = {}
        for k in np.flatnonzero(win.last_end >= 0).tolist():
            t = int(win.last_end[k] + win.end_spread[k] // 2)
            for c in self.key_sets(win, k)[1]:
                if out.get(c, -1) < t:
                    out[c] = t
        return out

    # ----- stuck -----------------------------------------------------------------------------
    def stuck_transfers(self, win: ConnWindow | None, now: int, min_age: int) -> list[int]:
        """Keys of the connections with a transfer open for at least ``min_age``."""
        if win is None or len(win.open_key) == 0:
            return []
        sel = win.open_start <= now - min_age
        return sorted(set(win.open_key[sel].tolist()))

    def comm_hang(self, win: ConnWindow | None, groups: list[int], stuck_keys: list[int],
                  since: int, group_last_end: np.ndarray) -> tuple[list[Suspect], str]:
        """Suspects of calls that everyone entered and nothing finishes, localized jointly: a
        dead component stops every transfer across it, in whatever call."""
        if stuck_keys and win is not None:
            return self._hang_conns(win, stuck_keys)
        sets = [self.group_sets(g)[0] for g in groups]
        if any(sets):
            stuck = set(groups)
            moved = np.flatnonzero(group_last_end[: len(self.arena)] > since)
            clear = [self.group_sets(int(h))[1] for h in moved if int(h) not in stuck]
            found, _ = explain([x for x in sets if x], clear, 0.99)
            if found:
                # equally explaining components: the one silent the longest first
                alive: dict[Component, int] = {}
                for h in np.flatnonzero(group_last_end[: len(self.arena)] >= 0).tolist():
                    if h in stuck:
                        continue
                    t = int(group_last_end[h])
                    for c in self.group_sets(h)[1]:
                        if alive.get(c, -1) < t:
                            alive[c] = t
                # on every candidate path of a stuck communicator before ECMP alternatives (on
                # some of its paths only: no healthy communicator ever surely crosses those, so
                # they are never seen alive and would otherwise always come first)
                sure = frozenset().union(*[self.group_sets(g)[1] for g in groups])
                out = _suspects(found)
                out.sort(key=lambda x: (-x.score, Component(x.type, x.id) not in sure,
                                        alive.get(Component(x.type, x.id), -1)))
                if not self._on_one_path(found[0], groups, sure):
                    return out, UNPLACED
                return out, "no other communicator through these components moved"
        m = sorted({r for g in groups for r in self.arena.members[g].tolist()})
        return (self.placement.suspects(m, [1.0 / len(m)] * len(m)),
                "no connection records to localize the transfer")

    def _on_one_path(self, e: Explanation, groups: list[int],
                     sure: frozenset[Component]) -> bool:
        """Whether the explanation's tied components lie on one candidate path between two
        members of the stuck communicators (a NIC and its cable; a leaf, an uplink and a spine
        of one route): the hang is placed on that path. Tied across different paths (the NICs
        of several members, the spines of every ECMP route between two leaves), nothing says
        which of them carries the stuck transfer. Those of the tie on every candidate path of
        the stuck communicators (``sure``: the cables of a pair's two ends, say, beside the
        spines of its routes) are the ones judged when there are any: the report names them
        first. Without a topology the components are ranks, and the tie stands as it is."""
        tied = frozenset(e.components)
        tied = (tied & sure) or tied
        if self.paths is None or len(tied) <= 1:
            return True
        for g in groups:
            for s, d in self._ring_pairs(g):
                if not tied <= self.pair(s, d)[0]:
                    continue
                a, b = self.placement.nic(s), self.placement.nic(d)
                if a is not None and b is not None and self.paths.on_one_path(a, b, tied):
                    return True
        return False

    @staticmethod
    def _stalled_by(win: ConnWindow, sel: np.ndarray) -> int:
        """The latest moment by which the stuck transfers (rows ``sel`` of the open ones)
        surely stopped moving. A component may die half-way through a transfer, so traffic that
        finished after the stuck one began proves nothing by itself; traffic that finished after
        it stopped proves its path alive. It stopped before it would normally have ended (its
        connection's last duration), and before any transfer of the same call that ended short
        of its usual bytes: that one ran dry because the stuck one stopped feeding it (a ring
        forwards what it receives)."""
        keys = win.open_key[sel]
        by = int((win.open_start[sel] + win.last_dur[keys]).min())
        starved = np.zeros(len(win), dtype=bool)
        began = win.last_end - win.last_dur
        for pg, seq, key, start in set(zip(win.pg[keys].tolist(), win.open_seq[sel].tolist(),
                                           keys.tolist(), win.open_start[sel].tolist())):
            if pg >= 0 and seq >= 0:
                starved |= (win.pg == pg) & (win.last_seq == seq)
            elif win.transfers[key]:
                # a transfer not tied to its call: those of the same collective began with it
                starved |= win.transfers & (win.pg < 0) \
                    & (np.abs(began - start) <= win.cfg.clock_skew_ns)
        starved &= win.last_bytes < 0.9 * win.prev_bytes
        starved[keys] = False
        if starved.any():
            # (by its own host's clock, which may put it before the stuck one began)
            by = min(by, int(win.last_end[starved].min()))
        return by

    def _window_odds(self, win: ConnWindow, stuck_keys: list[int], stalled: int
                     ) -> dict[Component, float]:
        """Per component surely crossed by a stuck transfer, how well its death fits the
        connections across it whose last transfer ended in a window straddling the stop (known
        to a window only: ``end_spread``) and that are not stuck. Had it died, each of them
        finished before the stop: at most the part of its window before ``stalled``, for a time
        uniform over the window. Relative to the best fitting component, and only where decisive
        (``1 / _DECISIVE`` or less; else 1): a switch whose other connections kept finishing
        in that window comes after the cable all of whose connections stuck, while two cables
        of one path stay tied on a few connections' difference. With per-transfer times no such
        connection is left undecided, and every value is 1."""
        unsure = np.flatnonzero((win.last_end < stalled)
                                & (win.last_end + win.end_spread >= stalled))
        stuck = set(stuck_keys)
        loglik: dict[Component, float] = {c: 0.0 for k in stuck
                                           for c in self.key_sets(win, k)[1]}
        for k in unsure.tolist():
            if k in stuck:
                continue
            before = (stalled - int(win.last_end[k])) / max(int(win.end_spread[k]), 1)
            ll = math.log(min(max(before, 1e-6), 1.0))
            for c in self.key_sets(win, k)[1]:
                if c in loglik:
                    loglik[c] += ll
        if not loglik:
            return {}
        best = max(loglik.values())
        return {c: (math.exp(v - best) if v - best <= -math.log(_DECISIVE) else 1.0)
                for c, v in loglik.items()}

    def _hang_conns(self, win: ConnWindow, stuck_keys: list[int]) -> tuple[list[Suspect], str]:
        """Stuck transfers onto their paths: the components that explain the most of them and
        that no transfer finishing after they stopped moving (:meth:`_stalled_by`) crossed.
        They are scored by how long each had been silent before then (a single stuck transfer:
        both its ends; equal spans, e.g. a NIC and its cable, or two components never seen
        alive: equal scores), the senders as if stalled by themselves (GPU or software). The
        other uncleared components of the stuck paths follow, by how many stuck transfers cross
        them, so that the far end of a stuck connection stays in view."""
        sel = np.isin(win.open_key, stuck_keys)
        stalled = self._stalled_by(win, sel)
        proven = win.last_end >= stalled
        moved = np.flatnonzero(proven)
        clear = [self.key_sets(win, int(k))[1] for k in moved]
        obs = [o for o in (self.key_sets(win, k)[0] for k in stuck_keys) if o]
        found, _ = explain(obs, clear, self.cfg.comm_purity)
        srcs = sorted({int(win.src[k]) for k in stuck_keys})
        n = len(stuck_keys)
        if not found:
            return (self.placement.suspects(srcs, [0.6] * len(srcs)),
                    f"{n} transfer(s) stopped while the rest of the path kept moving")
        alive = self._last_alive(win)
        # the odds of each explanation: a component failing at a constant rate died within the
        # time it was silent before the transfers stopped (a NIC and its cable: equal odds); a
        # sender that stalled by itself (GPU or software) is weighed as a component dying
        # within half of a stuck transfer's normal run
        odds: dict[Component, float] = {}
        fit = self._window_odds(win, stuck_keys, stalled)
        for e in found:
            score = float(min(max(e.score, 0.05), 1.0))
            for c in e.components:
                odds[c] = max(odds.get(c, 0.0),
                              score * max(stalled - alive.get(c, win.first_ns), 1)
                              * fit.get(c, 1.0))
        sender = 0.5 * max(int(win.last_dur[win.open_key[sel]].max()),
                           stalled - int(win.open_start[sel].min()), 1)
        if len({self.placement.host(r) or r for r in srcs}) > 1:
            # senders on several hosts stalling within the same moment are as many independent
            # events, against one component: they follow the components
            sender = min(sender, 0.5 * min(odds.values()))
        top = max(max(odds.values()), sender)
        out = [Suspect(c.type, c.id, round(o / top, 4)) for c, o in odds.items()]
        cleared: set[Component] = set().union(*clear) if clear else set()
        count: dict[Component, int] = {}
        for o in obs:
            for c in o:
                if c not in odds and c not in cleared:
                    count[c] = count.get(c, 0) + 1
        low = min(x.score for x in out)
        rest = sorted(count, key=lambda c: (-count[c], KIND_ORDER.get(c.type, 9),
                                            alive.get(c, -1), c.id))
        out += [Suspect(c.type, c.id, round(0.5 * low * count[c] / len(obs), 4)) for c in rest]
        gpu = round(sender / top, 4)
        out += self.placement.suspects(srcs, [gpu] * len(srcs))
        out.sort(key=lambda x: (-x.score, KIND_ORDER.get(x.type, 9), x.id))
        if out[0].type in ("gpu", "rank", "host"):
            how = (f"{n} transfer(s) stopped moving while every component on their paths had "
                   "carried traffic shortly before: the sender more likely stalled")
        elif len(found) == 1 and len(found[0].components) > 1:
            how = (f"{n} transfer(s) stopped moving; {len(found[0].components)} components "
                   "lie on exactly the stuck paths, the one silent longest named first"
                   + ("" if all(fit.get(c, 1.0) == 1.0 for c in found[0].components)
                      else " (one whose other connections went on finishing around the stop "
                           "after one whose every connection stuck)"))
        else:
            how = f"{n} transfer(s) stopped moving"
        return out, how


def _suspects(found: list[Explanation]) -> list[Suspect]:
    out: list[Suspect] = []
    for e in found:
        score = float(min(max(e.score, 0.05), 1.0))
        for c in e.components:
            if c.type == "rank":
                out.append(Suspect("rank", c.id, score, rank=int(c.id)))
            else:
                out.append(Suspect(c.type, c.id, score))
    return out

