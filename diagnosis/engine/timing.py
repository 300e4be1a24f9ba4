"""What each communicator's calls normally take: the span from first entry to last exit, the
period between calls, and the transfer time after the last member arrived. The hang bound and
the communication-slow series come from here."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Protocol

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.distinct import distinct_inverse
from diagnosis.engine.medians import nanmedian
from diagnosis.engine.series import SeriesBank

_K = 32


class _Pace(Protocol):
    """Each group's mean time between calls (ns; NaN: fewer than ``min_calls`` seen), as
    ``ProgressBoard.period`` gives it."""

    def __call__(self, groups: np.ndarray, min_calls: int = ..., /) -> np.ndarray: ...


class GroupTiming:
    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.span = np.zeros((0, _K))
        self.tail = np.zeros((0, _K))     # from the last entry to the last exit
        self.period = np.zeros((0, _K))
        self.count = np.zeros(0, dtype=np.int64)
        self.last_first = np.zeros(0, dtype=np.int64)
        self.last_seq = np.zeros(0, dtype=np.int64)
        self.last_end = np.zeros(0, dtype=np.int64)   # last time a call of the group finished
        # a stall that recurs (rank 0 writing a checkpoint every few seconds while its peers
        # wait): the wait it is known to last, which the hang bound then allows for
        self.recurring = np.zeros(0, dtype=np.int64)
        self._last_stall: dict[int, tuple[int, int]] = {}   # group -> (cleared at, duration)
        # transfer time per byte after the last member arrived, against its own baseline: one
        # series per (communicator, operation, size), the unit that recurs every iteration
        self.xfer = SeriesBank(config.history, config.comm_skip, config.comm_learn)
        self._xkeys: dict[tuple[int, int], int] = {}
        self.xkey_group: list[int] = []
        # per communicator and operation id: a call of it completed normally
        self._done_ops = np.zeros((0, 0), dtype=bool)
        #: the widest seq gap between two calls of a stream that still gives their period: 1
        #: with every call recorded, wider when calls are sampled (``Engine.set_sample``)
        self.max_gap = 1
        #: each group's pace from progress records (``ProgressBoard.period``), when there are
        #: any: every call counts there, sampled or not
        self.pace: _Pace | None = None
        #: each group's longest recent transfer on its connections (ns, NaN: none), when there
        #: are connection records (``ConnWindow.transfer_ns``)
        self.transfer: Callable[[np.ndarray], np.ndarray] | None = None

    def _ensure(self, G: int) -> None:
        cap = len(self.count)
        if cap >= G:
            return
        grow = max(G, 2 * cap, 64) - cap
        self.span = np.vstack([self.span, np.full((grow, _K), np.nan)])
        self.tail = np.vstack([self.tail, np.full((grow, _K), np.nan)])
        self.period = np.vstack([self.period, np.full((grow, _K), np.nan)])
        self.count = np.r_[self.count, np.zeros(grow, dtype=np.int64)]
        self.last_first = np.r_[self.last_first, np.full(grow, -1, dtype=np.int64)]
        self.last_seq = np.r_[self.last_seq, np.full(grow, -2, dtype=np.int64)]
        self.last_end = np.r_[self.last_end, np.full(grow, -1, dtype=np.int64)]
        self.recurring = np.r_[self.recurring, np.zeros(grow, dtype=np.int64)]

    def stall_cleared(self, group: int, onset_ns: int, end_ns: int) -> bool:
        """A hang of ``group`` cleared after ``end_ns - onset_ns``. A second one of about the
        same length soon after (within 20 times it) makes that wait, with a margin, part of
        the group's hang bound: a periodic pause is the job's rhythm, not a fault, and a real
        hang is then found that much later. Returns whether the stall is now known as
        recurring."""
        self._ensure(group + 1)
        took = max(int(end_ns - onset_ns), 1)
        prev = self._last_stall.get(group)
        self._last_stall[group] = (int(end_ns), took)
        if prev is None:
            return False
        at, before = prev
        if end_ns - at > 20 * max(took, before) or not 0.5 <= took / before <= 2.0:
            return False
        self.recurring[group] = max(int(self.recurring[group]), int(1.5 * max(took, before)))
        return True

    def update(self, fin: Finished) -> None:
        self._ensure(len(self.arena))
        g, seq = fin.group, fin.seq
        first = fin.enter.min(axis=1)
        last = fin.enter.max(axis=1)
        end_max = fin.end.max(axis=1)
        end_med = np.median(fin.end, axis=1)
        # a failed call (or one a teardown ended) is not a normal span: it would stretch the
        # hang bound by however long the job hung before it
        span = np.where((fin.status > 0).any(axis=1), np.nan,
                        (end_max - first).astype(np.float64))
        # previous call of the same group: earlier row of this batch, else remembered
        same = np.zeros(len(g), dtype=bool)
        same[1:] = g[1:] == g[:-1]
        prev_first = self.last_first[g].copy()
        prev_seq = self.last_seq[g].copy()
        prev_first[1:][same[1:]] = first[:-1][same[1:]]
        prev_seq[1:][same[1:]] = seq[:-1][same[1:]]
        # calls of a sampled stream are several seqs apart: the mean period between them
        gap = seq - prev_seq
        period = np.where((gap >= 1) & (gap <= self.max_gap) & (prev_first >= 0),
                          (first - prev_first) / np.maximum(gap, 1), np.nan)
        start = ~same
        firsts = np.flatnonzero(start)
        occ = np.arange(len(g)) - np.repeat(firsts, np.diff(np.r_[firsts, len(g)]))
        col = (self.count[g] + occ) % _K
        self.span[g, col] = span
        self.tail[g, col] = np.where(np.isnan(span), np.nan, (end_max - last).astype(np.float64))
        self.period[g, col] = period
        np.add.at(self.count, g, 1)
        tail = np.r_[~same[1:], True]
        self.last_first[g[tail]] = first[tail]
        self.last_seq[g[tail]] = seq[tail]
        np.maximum.at(self.last_end, g, end_max)
        nbytes = np.maximum(self.arena.s_bytes[fin.slots], 1)
        op = self.arena.s_op[fin.slots]
        xfer = np.maximum(end_med - last, 0).astype(np.float64) + 1.0
        ok = (fin.status == 0).all(axis=1)
        if ok.any():
            self._mark_done(g[ok], op[ok])
            # one integer per (communicator, op, size): sizes below 2**40, ops below 2**23
            sig = (op[ok].astype(np.int64) << 40) | nbytes[ok].astype(np.int64)
            usig, sinv = distinct_inverse(sig)
            key = (g[ok].astype(np.int64) << 24) | sinv.astype(np.int64)
            uniq, inv = distinct_inverse(key)
            ids = np.empty(len(uniq), dtype=np.int64)
            for i, k in enumerate(uniq.tolist()):
                t = (k >> 24, int(usig[k & 0xFFFFFF]))
                kid = self._xkeys.get(t)
                if kid is None:
                    kid = self._xkeys[t] = len(self.xkey_group)
                    self.xkey_group.append(t[0])
                ids[i] = kid
            self.xfer.add(ids[inv.ravel()], xfer[ok] / nbytes[ok], end_max[ok])

    def _mark_done(self, groups: np.ndarray, ops: np.ndarray) -> None:
        n_g, n_o = self._done_ops.shape
        need_g, need_o = int(groups.max()) + 1, int(ops.max()) + 1
        if need_g > n_g or need_o > n_o:
            grown = np.zeros((max(need_g, 2 * n_g), max(need_o, n_o + 8)), dtype=bool)
            grown[:n_g, :n_o] = self._done_ops
            self._done_ops = grown
        self._done_ops[groups, ops] = True

    def novel(self, groups: np.ndarray, ops: np.ndarray) -> np.ndarray:
        """Whether each (communicator, operation) has never completed a call: nothing tells
        how long such a call normally waits (a barrier after a checkpoint that one rank
        writes alone, an evaluation step), so its hang bound is the cold one."""
        g, o = np.asarray(groups, dtype=np.int64), np.asarray(ops, dtype=np.int64)
        n_g, n_o = self._done_ops.shape
        known = (g >= 0) & (g < n_g) & (o < n_o)
        out = np.ones(len(g), dtype=bool)
        gk = g[known]
        ok = o[known]
        # a call known only from progress records (no op named): novel only to a communicator
        # that never completed anything
        done = np.where(ok >= 0, self._done_ops[gk, np.maximum(ok, 0)],
                        self._done_ops[gk].any(axis=1))
        # a point-to-point channel carries one operation, though a call is named by whichever
        # end's row came last (a receiver waiting alone: its recv)
        p2p = self.arena.p2p[gk]
        done[p2p] |= self._done_ops[gk[p2p]].any(axis=1)
        out[known] = ~done
        unnamed = (o < 0) & (g >= 0)
        if self.pace is not None and unnamed.any():
            # ... or whose progress records show completed calls, kept or not
            out[unnamed] &= ~np.isfinite(self.pace(g[unnamed], 1))
        return out

    def iteration_ns(self, min_periods: int = 8) -> int:
        """The job's iteration, as the longest usual gap between a communicator's calls (the
        largest of their median periods, over those with ``min_periods`` seen): a communicator
        called once per iteration has it, one called more often a shorter one; 0 before any
        is known. (Medians: the longest single gaps are pauses and slow iterations.)"""
        self._ensure(len(self.arena))
        seen = np.isfinite(self.period).sum(axis=1) >= min_periods
        best = 0
        if seen.any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                best = int(np.nanmax(nanmedian(self.period[seen], axis=1)))
        if self.pace is not None and len(self.arena):
            pace = self.pace(np.arange(len(self.arena)), min_periods)
            if np.isfinite(pace).any():
                best = max(best, int(np.nanmax(pace)))
        return best

    def median_period(self, groups: np.ndarray) -> np.ndarray:
        """Each group's median time between calls (ns; NaN while unknown)."""
        self._ensure(len(self.arena))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return nanmedian(self.period[groups], axis=1) if len(groups) else np.zeros(0)

    def settle(self, group: int) -> int:
        """How long a call of the communicator normally runs after its last member entered
        (median; 0 without history)."""
        self._ensure(len(self.arena))
        row = self.tail[group]
        row = row[~np.isnan(row)]
        return int(np.median(row)) if len(row) else 0

    def tail_bound(self, groups: np.ndarray) -> np.ndarray:
        """The hang bound (ns) of a call every member has entered: a multiple of the longest
        normal run after the last entry, floored. What the members did between calls no longer
        matters, so a stall of the whole job some calls ago (which stretched the periods) does
        not delay it; a communicator without history uses :meth:`bound`."""
        self._ensure(len(self.arena))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            tail = np.nanmax(self.tail[groups], axis=1)
        if self.transfer is not None and np.isnan(tail).any():
            # no kept call of it finished yet (sampled calls): its connections' transfers
            # say how long its data takes once everyone is in
            tail = np.fmax(tail, self.transfer(np.asarray(groups, dtype=np.int64)))
        out = np.where(np.isnan(tail), self.bound(groups),
                       self.cfg.hang_factor * np.nan_to_num(tail, nan=0.0))
        out = np.maximum(out, self.recurring[np.asarray(groups, dtype=np.int64)])
        return np.maximum(out, self.cfg.hang_min_ns).astype(np.int64)

    def bound(self, groups: np.ndarray) -> np.ndarray:
        """The hang bound (ns) of each communicator: a multiple of its longest normal span plus
        its longest period, floored; a communicator without history borrows the job's largest."""
        self._ensure(len(self.arena))
        learnt, known = self._learnt(np.asarray(groups, dtype=np.int64))
        if known.all():
            out = learnt
        else:
            every, some = self._learnt(np.arange(len(self.arena)))
            fallback = float(np.max(every[some])) if some.any() else float(self.cfg.hang_cold_ns)
            out = np.where(known, learnt, fallback)
        out = np.maximum(out, self.recurring[np.asarray(groups, dtype=np.int64)])
        return np.maximum(out, self.cfg.hang_min_ns).astype(np.int64)

    def _learnt(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A multiple of each group's longest normal span plus its longest period (or its
        pace from progress records, when longer), and whether anything was learnt of it."""
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            span = np.nanmax(self.span[groups], axis=1) if len(groups) else np.zeros(0)
            period = np.nanmax(self.period[groups], axis=1) if len(groups) else np.zeros(0)
        known = self.count[groups] > 0
        if self.pace is not None:
            pace = self.pace(groups)
            period = np.fmax(period, pace)
            known |= np.isfinite(pace)
        learnt = self.cfg.hang_factor * (np.nan_to_num(span, nan=0.0)
                                         + np.nan_to_num(period, nan=0.0))
        return learnt, known
