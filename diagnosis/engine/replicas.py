"""What a communicator's replicas took over the same calls: the like-for-like measure of its pace
when only one call in K is kept.

The data-parallel replicas of a pipeline stage run the same calls in the same order, so the
calls ``s1..s2`` of one tensor-parallel group are the same work (the same layers, the same pass,
the same waits of the schedule) as the calls ``s1..s2`` of each of its replicas. A span between
two kept calls mixes work of different cost (a backward pass computes about twice as long per
call as a forward one); compared with the replicas' time over the same sequence numbers, which
pass it holds no longer matters. Each group keeps other calls (the sampling rule hashes the
communicator's name with the sequence number), so a replica's time at a sequence number is
interpolated between its own kept calls around it.
"""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena

# the most replicas a span is compared with: a median of this many is steady, and the cost per
# span stays bounded in a job of thousands of replicas
MAX_REPLICAS = 16
# the most calls between the two kept calls of a replica that a time is interpolated over: a
# wider one holds too much other work for its share to be read off
_MAX_GAP = 32
_SEQ_BITS = 40


class Replicas:
    """Per communicator (collectives only), its replicas: the communicators of its size that
    share none of its ranks and whose members meet its members in a collective communicator
    other than a pipeline's (one that carries send/recv: its stages do other work). Computed
    again when a communicator or a pipeline is added."""

    def __init__(self, arena: Arena) -> None:
        self.arena = arena
        self._known = (-1, -1)
        self._seen = 0                   # communicators looked at
        self._coll: list[int] = []       # the collective communicators among them
        self._pipelines: set[int] = set()    # pg ids that carry send/recv
        self._pair_g = self._pair_h = self._pair_via = np.zeros(0, dtype=np.int64)
        self.ptr = np.zeros(1, dtype=np.int64)
        self.idx = np.zeros(0, dtype=np.int64)

    def of(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per group, its replicas: (count, flat indices into ``self.idx`` of each's list)."""
        self._refresh()
        cnt = self.ptr[groups + 1] - self.ptr[groups]
        first = np.repeat(self.ptr[groups], cnt)
        return cnt, first + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)

    def _refresh(self) -> None:
        a = self.arena
        total = len(a.members)
        if total == self._seen:
            return
        for c in range(self._seen, total):
            if a.p2p[c]:
                self._pipelines.add(a.pg_of[c])
            else:
                self._coll.append(c)
        self._seen = total
        if len(self._coll) != self._known[0]:
            self._links()
        known = (len(self._coll), len(self._pipelines))
        if known != self._known:
            self._choose(total)
            self._known = known
        else:       # (only channels were added: they have no replicas)
            self.ptr = np.r_[self.ptr, np.full(total + 1 - len(self.ptr), self.ptr[-1])]

    def _links(self) -> None:
        """Every pair of same-size, disjoint collective communicators whose members meet in a
        third, and that third's pg id (one row per link)."""
        a = self.arena
        meets: dict[int, list[int]] = {}
        for c in self._coll:
            for r in a.members[c].tolist():
                meets.setdefault(r, []).append(c)
        by_size: dict[int, list[int]] = {}
        for g in self._coll:
            by_size.setdefault(int(a.n[g]), []).append(g)
        gs: list[int] = []
        hs: list[int] = []
        via: list[int] = []
        for groups in by_size.values():
            of_rank: dict[int, list[int]] = {}
            for g in groups:
                for r in a.members[g].tolist():
                    of_rank.setdefault(r, []).append(g)
            for g in groups:
                mine = set(a.members[g].tolist())
                near: dict[tuple[int, int], None] = {}
                for r in mine:
                    for c in meets.get(r, ()):
                        if c != g:
                            for q in a.members[c].tolist():
                                for h in of_rank.get(q, ()):
                                    near[(h, a.pg_of[c])] = None
                for h, pg in near:
                    if h != g and not mine.intersection(a.members[h].tolist()):
                        gs.append(g)
                        hs.append(h)
                        via.append(pg)
        self._pair_g = np.asarray(gs, dtype=np.int64)
        self._pair_h = np.asarray(hs, dtype=np.int64)
        self._pair_via = np.asarray(via, dtype=np.int64)

    def _choose(self, total: int) -> None:
        """Per group, the replicas linked through a communicator that is no pipeline, the
        nearest ``MAX_REPLICAS`` in index order (a deterministic choice, spread over the
        job)."""
        pipe = np.fromiter(self._pipelines, np.int64, len(self._pipelines))
        ok = ~np.isin(self._pair_via, pipe)
        g, h = self._pair_g[ok], self._pair_h[ok]
        if not len(g):
            self.idx = np.zeros(0, dtype=np.int64)
            self.ptr = np.zeros(total + 1, dtype=np.int64)
            return
        o = np.lexsort((h, np.abs(h - g), g))
        g, h = g[o], h[o]
        first = np.r_[True, (g[1:] != g[:-1]) | (h[1:] != h[:-1])]     # (one row per pair)
        g, h = g[first], h[first]
        head = np.r_[True, g[1:] != g[:-1]]
        starts = np.flatnonzero(head)
        rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
        g, h = g[rank < MAX_REPLICAS], h[rank < MAX_REPLICAS]
        o = np.lexsort((h, g))
        self.idx = h[o]
        self.ptr = np.r_[0, np.cumsum(np.bincount(g[o], minlength=total))].astype(np.int64)


class KeptCalls:
    """The recent kept calls of every communicator, (group, seq, time), to read off when a group
    reached a sequence number."""

    def __init__(self) -> None:
        self.g = np.zeros(0, dtype=np.int64)
        self.s = np.zeros(0, dtype=np.int64)
        self.t = np.zeros(0, dtype=np.int64)
        self._sorted = True

    def add(self, g: np.ndarray, s: np.ndarray, t: np.ndarray) -> None:
        self.g, self.s, self.t = np.r_[self.g, g], np.r_[self.s, s], np.r_[self.t, t]
        self._sorted = False

    def forget_before(self, t_ns: int) -> None:
        """Drop calls older than ``t_ns`` but each group's newest two (a group that paused
        still needs the call its next span starts from)."""
        self._sort()
        last = np.r_[self.g[2:] != self.g[:-2], True, True][: len(self.g)]
        keep = (self.t >= t_ns) | last
        self.g, self.s, self.t = self.g[keep], self.s[keep], self.t[keep]

    def _sort(self) -> None:
        if not self._sorted:
            o = np.lexsort((self.s, self.g))
            self.g, self.s, self.t = self.g[o], self.s[o], self.t[o]
            self._sorted = True

    def at(self, g: np.ndarray, s: np.ndarray) -> np.ndarray:
        """When group ``g`` reached seq ``s`` (its time there, interpolated between its kept
        calls around it; nan where it has none on either side close enough)."""
        self._sort()
        if not len(self.g) or not len(g):
            return np.full(len(g), np.nan)
        keys = (self.g << _SEQ_BITS) | self.s
        q = (g << _SEQ_BITS) | s
        i = np.searchsorted(keys, q, side="right") - 1
        ic = np.clip(i, 0, len(keys) - 1)
        j = np.minimum(ic + 1, len(keys) - 1)
        exact = (i >= 0) & (keys[ic] == q)
        gap = self.s[j] - self.s[ic]
        inside = (i >= 0) & (j > ic) & (self.g[ic] == g) & (self.g[j] == g) & (gap > 0) \
            & (gap <= _MAX_GAP)
        frac = (s - self.s[ic]) / np.maximum(gap, 1)
        t = self.t[ic] + frac * (self.t[j] - self.t[ic])
        return np.where(exact, self.t[ic].astype(float), np.where(inside, t, np.nan))


def replica_time(replicas: Replicas, calls: KeptCalls, g: np.ndarray, s1: np.ndarray,
                 s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per span (group ``g`` from seq ``s1`` to ``s2``): the median time its replicas took
    over the same calls (nan where fewer than two of them, or than it has, are known there),
    and how many replicas it has."""
    cnt, flat = replicas.of(g)
    out = np.full(len(g), np.nan)
    if not len(flat):
        return out, cnt
    span = np.repeat(np.arange(len(g)), cnt)
    p = replicas.idx[flat]
    d = calls.at(p, s2[span]) - calls.at(p, s1[span])
    ok = np.isfinite(d) & (d > 0)
    span, d = span[ok], d[ok]
    o = np.lexsort((d, span))
    span, d = span[o], d[o]
    known = np.bincount(span, minlength=len(g))
    start = np.r_[0, np.cumsum(known)[:-1]]
    has = known >= np.minimum(cnt, 2)
    has &= known > 0
    # (the lower of the two middle values: no interpolation needed here)
    out[has] = d[start[has] + (known[has] - 1) // 2]
    return out, cnt
