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
from diagnosis.engine.distinct import distinct

# the most replicas a span is compared with: a median of this many is steady, and the cost per
# span stays bounded in a job of thousands of replicas
MAX_REPLICAS = 16
# the most calls between the two kept calls of a replica that a time is interpolated over: a
# wider one holds too much other work for its share to be read off
_MAX_GAP = 32
_SEQ_BITS = 40
# members of a meeting communicator taken around the group's own rank in it: the others stand
# for replicas far in index order, which the choice (the nearest MAX_REPLICAS) drops anyway.
# Unbounded, a data-parallel group of 16,384 linked every tensor-parallel group with every
# other: hundreds of millions of rows, gigabytes, at 131,072 ranks
_NEAR = 4 * MAX_REPLICAS
# groups linked at once (bounds the temporaries)
_CHUNK = 1024


def _expand(ptr: np.ndarray, idx: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a CSR table for each key: (the key's position, the value), key by key."""
    cnt = ptr[keys + 1] - ptr[keys]
    total = int(cnt.sum())
    pos = np.repeat(ptr[keys] - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)
    return np.repeat(np.arange(len(keys)), cnt), idx[pos]


def _csr(keys: np.ndarray, values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    o = np.argsort(keys, kind="stable")
    ptr = np.r_[0, np.cumsum(np.bincount(keys, minlength=size))].astype(np.int64)
    return ptr, values[o]


class Replicas:
    """Per communicator (collectives only), its replicas: the communicators of its size that
    share none of its ranks and whose members meet its members in a collective communicator
    other than a pipeline's (one that carries send/recv: its stages do other work). Found for
    the communicators asked about, again when a communicator or a pipeline is added."""

    def __init__(self, arena: Arena) -> None:
        self.arena = arena
        self._seen = 0                   # communicators looked at
        self._coll: list[int] = []       # the collective communicators among them
        self._pipelines: set[int] = set()    # pg ids that carry send/recv
        self._tables = -1                # collectives the membership tables were built for
        self._dirty = False              # links or pipelines changed since the choice
        self._full = False               # every group's choice must be made again
        self._fresh = 0                  # the parts of links from here on not chosen from
        self._done = np.zeros(0, dtype=bool)     # per communicator: its links are known
        # (group, candidate replica, the communicator they meet in), one row per link, in
        # parts as found (joined only for a choice made again for every group)
        self._links_found: list[np.ndarray] = []
        self.ptr = np.zeros(1, dtype=np.int64)
        self.idx = np.zeros(0, dtype=np.int64)

    def of(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per group, its replicas: (count, flat indices into ``self.idx`` of each's list)."""
        self._refresh()
        need = np.unique(groups[~self._done[groups]])
        if len(need):
            self._links(need)
        if self._dirty:
            self._choose()
        cnt = self.ptr[groups + 1] - self.ptr[groups]
        first = np.repeat(self.ptr[groups], cnt)
        return cnt, first + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)

    def _refresh(self) -> None:
        a = self.arena
        total = len(a.members)
        if total == self._seen:
            return
        pipes = len(self._pipelines)
        for c in range(self._seen, total):
            if a.p2p[c]:
                self._pipelines.add(a.pg_of[c])
            else:
                self._coll.append(c)
        self._seen = total
        self._done = np.r_[self._done, np.zeros(total - len(self._done), dtype=bool)]
        self.ptr = np.r_[self.ptr, np.full(total + 1 - len(self.ptr), self.ptr[-1])]
        if len(self._coll) != self._tables:
            coll = np.asarray(self._coll, dtype=np.int64)
            ranks = [a.members[c] for c in self._coll]
            sizes = np.array([len(r) for r in ranks], dtype=np.int64)
            mc = np.repeat(coll, sizes)
            mr = np.concatenate(ranks).astype(np.int64) if ranks else np.zeros(0, np.int64)
            self._cm = _csr(mc, mr, total)                                  # its members
            self._rc = _csr(mr, mc, int(mr.max()) + 1 if len(mr) else 0)    # a rank's comms
            # each (communicator, member) entry of ``_cm`` by key, to find a rank's place
            self._width = int(mr.max()) + 1 if len(mr) else 1
            owner = np.repeat(np.arange(total, dtype=np.int64), np.diff(self._cm[0]))
            key = owner * self._width + self._cm[1]
            o = np.argsort(key, kind="stable")
            self._cm_key = (key[o], o)
            self._tables = len(self._coll)
            self._done[:] = False
            self._links_found = []
            self._dirty = self._full = True
        elif len(self._pipelines) != pipes:
            self._dirty = self._full = True

    def _links(self, groups: np.ndarray) -> None:
        """The links of ``groups``: every same-size collective communicator sharing none of
        their ranks whose members meet theirs in a third (near the group's rank in it)."""
        for a in range(0, len(groups), _CHUNK):
            self._links_of(groups[a:a + _CHUNK])
        self._done[groups] = True
        self._dirty = True

    def _links_of(self, groups: np.ndarray) -> None:
        n, total = self.arena.n, len(self._done)
        cm_ptr, cm_idx = self._cm
        rc_ptr, rc_idx = self._rc
        row, r = _expand(cm_ptr, cm_idx, groups)
        g = groups[row]
        row, c = _expand(rc_ptr, rc_idx, r)
        g, r = g[row], r[row]
        # the communicators with a rank of the group: where it meets others, and none of them
        # a replica (they share its ranks)
        meet, first = np.unique(g * total + c, return_index=True)
        g, c, r = meet // total, meet % total, r[first]
        row, q = self._near(c, r)
        g, c = g[row], c[row]
        row, h = _expand(rc_ptr, rc_idx, q)
        g, c = g[row], c[row]
        keep = (n[h] == n[g]) & (h != g) & ~np.isin(g * total + h, meet)
        key = distinct((g[keep] * total + h[keep]) * total + c[keep])
        self._links_found.append(np.stack([key // (total * total), key // total % total,
                                           key % total]))

    def _near(self, c: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per communicator ``c[i]`` (of which ``r[i]`` is a member): up to ``_NEAR`` of its
        members around ``r[i]`` in its order, as (i, member) rows."""
        ptr, idx = self._cm
        keys, entry = self._cm_key
        size = ptr[c + 1] - ptr[c]
        at = entry[np.searchsorted(keys, c * self._width + r)] - ptr[c]
        width = np.minimum(size, _NEAR)
        lo = np.clip(at - _NEAR // 2, 0, size - width)
        rows = np.repeat(np.arange(len(c)), width)
        pos = np.repeat(ptr[c] + lo - (np.cumsum(width) - width), width) + \
            np.arange(int(width.sum()))
        return rows, idx[pos]

    def _choose(self) -> None:
        """Per group, the replicas linked through a communicator that is no pipeline, the
        nearest ``MAX_REPLICAS`` in index order (a deterministic choice, spread over the
        job). A group's choice depends on its own links alone: only the groups whose links
        came since the last choice are chosen for, unless a pipeline or the tables changed
        (a 100k-rank job's groups first show up a few hundred at a time)."""
        total = len(self._done)
        self._dirty = False
        full, self._full = self._full, False
        start = 0 if full else self._fresh
        pipe = np.fromiter(self._pipelines, np.int64, len(self._pipelines))
        pg_of = np.asarray(self.arena.pg_of[:total], dtype=np.int64)
        parts = self._links_found[start:]
        links = np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)
        # (a communicator found to be a pipeline stays one)
        links = links[:, ~np.isin(pg_of[links[2]], pipe)]
        self._links_found[start:] = [links]
        self._fresh = len(self._links_found)
        g, h = links[0], links[1]
        if len(g):
            pair = distinct(g * total + h)
            g, h = pair // total, pair % total
            # (per group, nearest first: one sort of one key)
            o = np.argsort((g * total + np.abs(h - g)) * total + h)
            g, h = g[o], h[o]
            starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
            rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
            g, h = g[rank < MAX_REPLICAS], h[rank < MAX_REPLICAS]
        if not full:   # the groups chosen for before keep their replicas
            kept = np.diff(self.ptr[: total + 1])
            g = np.r_[np.repeat(np.arange(total, dtype=np.int64), kept), g]
            h = np.r_[self.idx, h]
        o = np.argsort(g * total + h)
        self.idx = h[o].astype(np.int64)
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
            o = np.argsort((self.g << _SEQ_BITS) | self.s, kind="stable")
            self.g, self.s, self.t = self.g[o], self.s[o], self.t[o]
            self._sorted = True

    def at(self, g: np.ndarray, s: np.ndarray, max_gap: int = _MAX_GAP) -> np.ndarray:
        """When group ``g`` reached seq ``s`` (its time there, interpolated between its kept
        calls around it; nan where it has none on either side within ``max_gap`` calls)."""
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
            & (gap <= max_gap)
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


def _lower_medians(key: np.ndarray, v: np.ndarray, size: int) -> np.ndarray:
    """Per key in ``range(size)``, the lower median of its values (nan: none)."""
    o = np.lexsort((v, key))
    k, vv = key[o], v[o]
    cnt = np.bincount(k, minlength=size)
    start = np.cumsum(cnt) - cnt
    out = np.full(size, np.nan)
    has = cnt > 0
    out[has] = vv[start[has] + (cnt[has] - 1) // 2]
    return out


def _in_step(who: np.ndarray, pair: np.ndarray, s: np.ndarray, t: np.ndarray,
             owner: np.ndarray, groups: int) -> np.ndarray:
    """Per kept call pooled for a group (``who``) from one of its replicas (``pair``, an
    index into ``owner``, the group of each pair): whether that replica keeps step with the
    group's other replicas. One far behind (on a slow host's pipeline, or that slow host
    itself) would put its own lateness into the pooled time: a span that starts at another
    replica's call and ends at its call seems long, the other way short. Each call is
    compared with the pooled calls on either side of it; a replica whose mean lateness so
    is off the median of the group's replicas by more than four times their spread, and by
    more than one call's time, is left out."""
    keep = np.ones(len(who), dtype=bool)
    if len(who) < 3:
        return keep
    o = np.argsort((who << _SEQ_BITS) | s, kind="stable")
    w, ss, tt = who[o], s[o].astype(float), t[o].astype(float)
    inner = np.zeros(len(o), dtype=bool)
    inner[1:-1] = (w[:-2] == w[1:-1]) & (w[2:] == w[1:-1]) & (ss[2:] > ss[:-2])
    frac = (ss[1:-1] - ss[:-2]) / np.maximum(ss[2:] - ss[:-2], 1)
    late = np.zeros(len(o))
    late[1:-1] = np.where(inner[1:-1], tt[1:-1] - (tt[:-2] + frac * (tt[2:] - tt[:-2])), 0.0)
    # one call's time per group: over its pooled calls from first to last
    head = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
    tail = np.r_[head[1:], len(w)] - 1
    one = np.zeros(groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        one[w[head]] = np.nan_to_num((tt[tail] - tt[head]) / (ss[tail] - ss[head]))
    n_inner = np.bincount(pair[o], inner, minlength=len(owner))
    with np.errstate(invalid="ignore", divide="ignore"):
        pm = np.bincount(pair[o], late, minlength=len(owner)) / n_inner
    known = n_inner > 0
    gm = _lower_medians(owner[known], pm[known], groups)
    dev = np.abs(pm - gm[owner])
    spread = _lower_medians(owner[known], dev[known], groups)
    with np.errstate(invalid="ignore"):
        off = known & (dev > np.maximum(4 * np.nan_to_num(spread), one)[owner])
    return ~off[pair]


def pooled_time(replicas: Replicas, calls: KeptCalls, g: np.ndarray, s1: np.ndarray,
                s2: np.ndarray, max_gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Per span (group ``g`` from seq ``s1`` to ``s2``): the time its replicas took over the
    same calls, read off their kept calls pooled (nan where unknown), and how many replicas
    it has. With one call in K kept, each replica's own kept calls lie about K apart, too far
    to read a time at a sequence number off them (a span of K calls holds work of different
    cost); pooled, the replicas of a group keep about one call in K / (their number), and
    healthy replicas reach the same call at nearly the same time (the data-parallel
    all-reduce of each iteration keeps them together). ``max_gap``: the most calls between
    the two pooled kept calls a time is interpolated over."""
    ug, inv = np.unique(g, return_inverse=True)
    inv = inv.ravel()
    cnt_u, flat = replicas.of(ug)
    out = np.full(len(g), np.nan)
    cnt = cnt_u[inv]
    if not len(flat) or not len(calls.g):
        return out, cnt
    calls._sort()
    # per (group, replica): the replica's kept calls over the seqs the group's spans need
    owner = np.repeat(np.arange(len(ug)), cnt_u)
    p = replicas.idx[flat]
    lo_s = np.full(len(ug), np.iinfo(np.int64).max)
    hi_s = np.full(len(ug), -1)
    np.minimum.at(lo_s, inv, s1)
    np.maximum.at(hi_s, inv, s2)
    keys = (calls.g << _SEQ_BITS) | calls.s
    lo = np.searchsorted(keys, (p << _SEQ_BITS) | np.maximum(lo_s[owner] - max_gap, 0))
    hi = np.searchsorted(keys, (p << _SEQ_BITS) | (hi_s[owner] + max_gap), side="right")
    n = np.maximum(hi - lo, 0)
    rows = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
    who = np.repeat(owner, n)
    keep = _in_step(who, np.repeat(np.arange(len(p)), n), calls.s[rows], calls.t[rows],
                    owner, len(ug))
    rows, who = rows[keep], who[keep]
    # one point per (group, seq): replicas that kept the same call, their mean time
    key, at = np.unique((who << _SEQ_BITS) | calls.s[rows], return_inverse=True)
    pooled = KeptCalls()
    pooled.add(key >> _SEQ_BITS, key & ((1 << _SEQ_BITS) - 1),
               (np.bincount(at, calls.t[rows].astype(float)) / np.bincount(at)).astype(np.int64))
    d = pooled.at(inv, s2, max_gap) - pooled.at(inv, s1, max_gap)
    ok = np.isfinite(d) & (d > 0) & (cnt >= 2)
    out[ok] = d[ok]
    return out, cnt
