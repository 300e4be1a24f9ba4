"""Per-rank own time: the time a rank spends outside communication calls.

A rank that waits inside a call for a late peer is a victim; the time between the end of its
previous call and the start of its next is its own (compute, data loading, host work). Each
completed call is stamped with the rank's cumulative own time up to its entry, so the own time
between any two calls is a subtraction.
"""

from __future__ import annotations

import numpy as np


class OwnClock:
    def __init__(self) -> None:
        self.size = 0
        self.last_end = np.zeros(0, dtype=np.int64)
        self.own_total = np.zeros(0, dtype=np.int64)
        # the last call each rank completed: pg id, op id, seq, enter, end (-1: none)
        self.last_pg = np.zeros(0, dtype=np.int64)
        self.last_op = np.zeros(0, dtype=np.int64)
        self.last_seq = np.zeros(0, dtype=np.int64)
        self.last_enter = np.zeros(0, dtype=np.int64)
        self.seen = np.zeros(0, dtype=np.int64)   # last time anything was heard from the rank
        # entry of the newest open call of the rank that cannot be matched with its peers'
        # (a send/recv without its peer): the rank waits there, not absent (-1: none)
        self.unmatched_enter = np.zeros(0, dtype=np.int64)

    def ensure(self, max_rank: int) -> None:
        if max_rank < self.size:
            return
        new = max(max_rank + 1, 2 * self.size, 64)
        for name in ("last_end", "own_total", "last_pg", "last_op", "last_seq", "last_enter",
                     "seen", "unmatched_enter"):
            old = getattr(self, name)
            arr = np.full(new, 0 if name == "own_total" else -1, dtype=np.int64)
            arr[: self.size] = old
            setattr(self, name, arr)
        self.size = new

    def heard(self, rank: np.ndarray, t: np.ndarray) -> None:
        if len(rank):
            self.ensure(int(rank.max()))
            np.maximum.at(self.seen, rank, t)

    def entered_unmatched(self, rank: np.ndarray, enter: np.ndarray) -> None:
        if len(rank):
            self.ensure(int(rank.max()))
            np.maximum.at(self.unmatched_enter, rank, enter)

    def inside_unmatched(self) -> set[int]:
        """Ranks whose newest call is an open one that cannot be matched."""
        n = self.size
        return set(np.flatnonzero(self.unmatched_enter[:n] > self.last_enter[:n]).tolist())

    def stamp(self, rank: np.ndarray, enter: np.ndarray, end: np.ndarray, pg: np.ndarray,
              op: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """Own time of each completed call's rank up to the call's entry (original order)."""
        n = len(rank)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        self.ensure(int(rank.max()))
        o = np.lexsort((enter, rank))
        r, e, x = rank[o], enter[o], end[o]
        start = np.ones(n, dtype=bool)
        start[1:] = r[1:] != r[:-1]
        seg = np.cumsum(start) - 1
        t0 = int(min(e.min(), x.min()))
        span = int(max(e.max(), x.max())) - t0 + 1
        # running max of end within each rank: offset segments so one accumulate does them all
        shifted = (x - t0) + seg * span
        cm = np.maximum.accumulate(shifted) - seg * span + t0
        prev = np.empty(n, dtype=np.int64)
        prev[1:] = cm[:-1]
        prev[start] = -1
        prev = np.maximum(prev, self.last_end[r])
        gap = np.where(prev >= 0, np.maximum(e - prev, 0), 0)
        csum = np.cumsum(gap)
        first = np.flatnonzero(start)
        seg_base = csum[first] - gap[first]
        # own time up to and including this call's own gap
        own = self.own_total[r] + csum - seg_base[seg]
        last = np.r_[first[1:] - 1, n - 1]
        lr = r[last]
        newer = e[last] >= self.last_enter[lr]
        self.last_end[lr] = np.maximum(self.last_end[lr], cm[last])
        self.own_total[lr] = own[last]
        upd = last[newer]
        ur = r[upd]
        self.last_enter[ur] = e[upd]
        self.last_pg[ur] = pg[o][upd]
        self.last_op[ur] = op[o][upd]
        self.last_seq[ur] = seq[o][upd]
        out = np.empty(n, dtype=np.int64)
        out[o] = own
        return out
