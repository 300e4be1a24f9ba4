"""Recent instances of every communicator, one cell per (instance, member), in flat arrays.

An *instance* is one call as all its members see it: a collective ``(pg, seq)``, or the k-th
message of a point-to-point *channel* ``(pg, src -> dst)`` (its members are the sender and the
receiver, so the k-th ``send`` meets the k-th ``recv``). Each communicator owns ``window`` slots;
instance ``seq`` lives in slot ``seq % window``, and a slot's cells are contiguous, so a whole
batch of op rows lands with one vectorized scatter and a finished instance is read back as a row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from diagnosis.engine.distinct import distinct, distinct_inverse

log = logging.getLogger(__name__)

_RANK_BITS = 24   # ranks below 16M
_MISSING = np.int64(-1)


@dataclass
class Finished:
    """Instances of one communicator size that finished in one batch, members along axis 1."""

    slots: np.ndarray      # slot ids
    group: np.ndarray      # communicator index
    seq: np.ndarray
    enter: np.ndarray      # (k, n) int64
    end: np.ndarray        # (k, n) int64
    own: np.ndarray        # (k, n) int64, cumulative own time of the member (-1 unknown)
    status: np.ndarray     # (k, n) int8

    def take(self, rows: np.ndarray) -> Finished:
        """The instances selected by ``rows`` (a boolean mask or indices)."""
        return Finished(self.slots[rows], self.group[rows], self.seq[rows], self.enter[rows],
                        self.end[rows], self.own[rows], self.status[rows])


def slot_cuts(key: np.ndarray, seq: np.ndarray, window: int) -> list[int]:
    """Where to cut a batch of rows (in arrival order; ``key`` a communicator, or a channel's
    side, per row) so that no piece holds two instances of one communicator that share a slot
    (``seq % window``): the arena keeps the newer one, and the older one's rows, all of them
    complete, would be dropped. A batch holding more than ``window`` calls of a communicator
    (a short job's whole trace in one read block, minutes spilled while the daemon was away)
    is fed in pieces of at most that many, in the order they came."""
    n = len(seq)
    if n < 2:
        return []
    # the clash of each row: the latest earlier row of its slot with another sequence number
    # (-1: none). Rows sorted by slot, in arrival order within one, fall in runs of one
    # sequence number; a row's clash is the last row of the run before its own in its slot
    slot = key.astype(np.int64) * window + seq % window
    order = np.lexsort((np.arange(n), slot))
    s_slot, s_seq = slot[order], seq[order]
    new_slot = np.ones(n, dtype=bool)
    new_slot[1:] = s_slot[1:] != s_slot[:-1]
    new_run = new_slot.copy()
    new_run[1:] |= s_seq[1:] != s_seq[:-1]
    at = np.arange(n)
    run_start = np.maximum.accumulate(np.where(new_run, at, 0))
    slot_start = np.maximum.accumulate(np.where(new_slot, at, 0))
    before = run_start - 1
    clash = np.full(n, -1, dtype=np.int64)
    clash[order] = np.where(before >= slot_start, order[np.maximum(before, 0)], -1)
    # a piece runs from its first row to the first row that clashes with a row inside it
    cuts: list[int] = []
    lo = 0
    rows = np.flatnonzero(clash >= 0)
    for i, j in zip(rows.tolist(), clash[rows].tolist()):
        if j >= lo:
            lo = i
            cuts.append(i)
    return cuts


class Arena:
    def __init__(self, window: int) -> None:
        self.W = window
        self.names: list[str] = []           # pg name (channels: "pg:src>dst")
        self.pg_of: list[int] = []           # pg id of each communicator
        self.members: list[np.ndarray] = []  # global ranks in communicator order
        self.n = np.zeros(0, dtype=np.int64)
        self.base = np.zeros(0, dtype=np.int64)
        self.p2p = np.zeros(0, dtype=bool)
        self._by_pg: dict[int, int] = {}
        self._channels: dict[int, int] = {}
        self._member_keys: list[np.ndarray] = []
        self._member_pos: list[np.ndarray] = []     # each member's position, in the same order
        self._mkeys = np.zeros(0, dtype=np.int64)
        self._mpos = np.zeros(0, dtype=np.int64)
        self._mdirty = False
        self.cells = 0
        cap = 1024
        self.c_enter = np.full(cap, _MISSING)
        self.c_end = np.full(cap, _MISSING)
        self.c_own = np.full(cap, _MISSING)
        self.c_status = np.full(cap, -1, dtype=np.int8)
        self.c_rank = np.full(cap, _MISSING)   # the member rank each cell belongs to
        scap = 64 * window
        self.s_seq = np.full(scap, _MISSING)
        self.s_closed = np.zeros(scap, dtype=bool)
        # the instance is known from progress records only (window-coarse times, on the clock of
        # the progress stream, which may lag the op rows')
        self.s_coarse = np.zeros(scap, dtype=bool)
        self.s_entered = np.zeros(scap, dtype=np.int64)
        self.s_ended = np.zeros(scap, dtype=np.int64)
        # some member entered and the instance has not finished (kept as the counts change:
        # the hang scan reads it after every batch)
        self.s_open = np.zeros(scap, dtype=bool)
        self.s_op = np.zeros(scap, dtype=np.int64)
        self.s_bytes = np.zeros(scap, dtype=np.int64)
        self.evicted_open = 0
        # rows of a call older than the one its slot holds (come more than ``W`` calls late),
        # which cannot be placed
        self.stale_rows = 0

    # ----- communicators --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def add_group(self, pg: int, name: str, ranks: np.ndarray) -> int:
        g = self._by_pg.get(pg)
        if g is not None:
            if not np.array_equal(self.members[g], ranks):
                log.warning("group %s registered again with other ranks; keeping the first", name)
            return g
        g = self._new(pg, name, ranks, p2p=False)
        self._by_pg[pg] = g
        return g

    def channels(self, pg: np.ndarray, src: np.ndarray, dst: np.ndarray,
                 names: list[str]) -> np.ndarray:
        """The channel index of each (pg, src -> dst), created on first sight."""
        key = (pg.astype(np.int64) << (2 * _RANK_BITS)) | (src.astype(np.int64) << _RANK_BITS) \
            | dst.astype(np.int64)
        uniq, inv = distinct_inverse(key)
        out = np.fromiter(map(self._channels.get, uniq.tolist(), repeat(-1)), np.int64,
                          len(uniq))
        missing = np.flatnonzero(out < 0)
        if len(missing):
            mask = (1 << _RANK_BITS) - 1
            k = uniq[missing]
            p, s, d = k >> (2 * _RANK_BITS), (k >> _RANK_BITS) & mask, k & mask
            names_new = [f"{names[a]}:{b}>{c}" for a, b, c in zip(p.tolist(), s.tolist(),
                                                                  d.tolist())]
            first = self._new_many(p.tolist(), names_new, list(np.stack([s, d], axis=1)),
                                   p2p=True)
            out[missing] = first + np.arange(len(missing))
            for i, kk in enumerate(k.tolist()):
                self._channels[kk] = first + i
        return out[inv]

    def _new(self, pg: int, name: str, ranks: np.ndarray, p2p: bool) -> int:
        return self._new_many([pg], [name], [np.asarray(ranks)], p2p)

    def _new_many(self, pgs: list[int], names: list[str], ranks: list[np.ndarray],
                  p2p: bool) -> int:
        """Register communicators at once (one reallocation); returns the first new index."""
        g0 = len(self.names)
        sizes = np.array([len(r) for r in ranks], dtype=np.int64)
        bases = self.cells + np.concatenate([[0], np.cumsum(sizes * self.W)[:-1]])
        self.names.extend(names)
        self.pg_of.extend(pgs)
        self.members.extend(np.asarray(r, dtype=np.int64) for r in ranks)
        self.n = np.concatenate([self.n, sizes])
        self.base = np.concatenate([self.base, bases]).astype(np.int64)
        self.p2p = np.concatenate([self.p2p, np.full(len(ranks), p2p)])
        start = self.cells
        self.cells += int((sizes * self.W).sum())
        self._grow_cells(self.cells)
        self._grow_slots(len(self.names) * self.W)
        new = self.members[g0:]
        if len(set(sizes.tolist())) == 1:
            # equal sizes (channels): one tile of the stacked members
            self.c_rank[start:self.cells] = np.repeat(np.stack(new)[:, None, :], self.W,
                                                      axis=1).ravel()
        else:
            self.c_rank[start:self.cells] = np.concatenate([np.tile(m, self.W) for m in new])
        gids = np.arange(g0, len(self.names), dtype=np.int64)
        self._member_keys.append((np.repeat(gids, sizes) << _RANK_BITS) | np.concatenate(new))
        # (one array per registration: hundreds of thousands of channels, two members each)
        self._member_pos.append(np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes,
                                                                         sizes))
        self._mdirty = True
        return g0

    def _grow_cells(self, need: int) -> None:
        cap = len(self.c_enter)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name, fill in (("c_enter", _MISSING), ("c_end", _MISSING), ("c_own", _MISSING),
                           ("c_status", -1), ("c_rank", _MISSING)):
            old = getattr(self, name)
            arr = np.full(new, fill, dtype=old.dtype)
            arr[:cap] = old
            setattr(self, name, arr)

    def _grow_slots(self, need: int) -> None:
        cap = len(self.s_seq)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in ("s_seq", "s_closed", "s_coarse", "s_entered", "s_ended", "s_op",
                     "s_bytes", "s_open"):
            old = getattr(self, name)
            arr = np.full(new, -1 if name == "s_seq" else 0, dtype=old.dtype)
            arr[:cap] = old
            setattr(self, name, arr)

    def positions(self, g: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Each rank's position in its communicator, -1 when it is not a member."""
        if self._mdirty:
            keys = np.concatenate(self._member_keys) if self._member_keys else np.zeros(0, int)
            pos = np.concatenate(self._member_pos) if self._member_pos \
                else np.zeros(0, int)
            order = np.argsort(keys, kind="stable")
            self._mkeys, self._mpos = keys[order], pos[order]
            self._mdirty = False
        key = (g.astype(np.int64) << _RANK_BITS) | rank.astype(np.int64)
        i = np.searchsorted(self._mkeys, key)
        i = np.minimum(i, len(self._mkeys) - 1)
        found = (len(self._mkeys) > 0) & (self._mkeys[i] == key)
        return np.where(found, self._mpos[i], -1)

    def slot_cells(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat cell indices of the given slots (contiguous per slot) and each slot's size."""
        g = slots // self.W
        n = self.n[g]
        start = self.base[g] + (slots % self.W) * n
        total = int(n.sum())
        offs = np.cumsum(n) - n
        idx = np.repeat(start - offs, n) + np.arange(total)
        return idx, n

    # ----- ingest ---------------------------------------------------------------------------
    def ingest(self, g: np.ndarray, pos: np.ndarray, seq: np.ndarray, op: np.ndarray,
               nbytes: np.ndarray, enter: np.ndarray, end: np.ndarray, status: np.ndarray,
               own: np.ndarray) -> np.ndarray:
        """Scatter rows into their cells; return the slots that finished (every member ended)."""
        if len(g) == 0:
            return np.zeros(0, dtype=np.int64)
        W = self.W
        slot, _ = self._start_newer(g, seq)
        keep = seq == self.s_seq[slot]
        if not keep.all():
            self.stale_rows += int((~keep).sum())
            g, pos, seq, op, nbytes, enter, end, status, own, slot = (
                a[keep] for a in (g, pos, seq, op, nbytes, enter, end, status, own, slot))
        cell = self.base[g] + (seq % W) * self.n[g] + pos
        done = end >= 0
        end_v = np.where(done, end, self.c_end[cell])
        own_v = np.where(own >= 0, own, self.c_own[cell])
        old_status = self.c_status[cell]
        status_v = np.where(done | (status > 0), status, np.maximum(old_status, 0))
        # completed rows last, so that they win over an open row of the same call
        order = np.argsort(done, kind="stable")
        cell, enter, end_v, own_v, status_v = (a[order] for a in (cell, enter, end_v, own_v,
                                                                   status_v))
        self.c_enter[cell] = enter
        self.c_end[cell] = end_v
        self.c_own[cell] = own_v
        self.c_status[cell] = status_v
        self.s_op[slot] = op
        self.s_bytes[slot] = nbytes
        self.s_coarse[slot] = False
        touched, n = self._recount(slot)
        finished = touched[(self.s_ended[touched] == n) & ~self.s_closed[touched]]
        self.s_closed[finished] = True
        self._reopen(touched)
        return finished

    def fill(self, g: np.ndarray, pos: np.ndarray, seq: np.ndarray, enter: np.ndarray,
             end: np.ndarray, op: np.ndarray) -> None:
        """Cells known only approximately (from progress records): start the instances that are
        newer than their slot's, then set only what no row has set yet (an exact time, from an op
        row, wins). An instance every member has left is closed without being read back: its
        times are too coarse to learn from."""
        if len(g) == 0:
            return
        W = self.W
        slot, fresh = self._start_newer(g, seq)
        self.s_coarse[fresh] = True
        self.s_op[fresh] = -1
        self.s_bytes[fresh] = 0
        keep = (seq == self.s_seq[slot]) & ~self.s_closed[slot]
        g, pos, seq, enter, end, op, slot = (a[keep] for a in (g, pos, seq, enter, end, op, slot))
        if not len(g):
            return
        cell = self.base[g] + (seq % W) * self.n[g] + pos
        new_enter = (self.c_enter[cell] < 0) & (enter >= 0)
        self.c_enter[cell[new_enter]] = enter[new_enter]
        new_end = (self.c_end[cell] < 0) & (end >= 0)
        self.c_end[cell[new_end]] = end[new_end]
        self.c_status[cell[new_end]] = np.maximum(self.c_status[cell[new_end]], 0)
        known_op = (op >= 0) & (self.s_op[slot] < 0)
        self.s_op[slot[known_op]] = op[known_op]
        touched, n = self._recount(slot)
        self.s_closed[touched[self.s_ended[touched] == n]] = True
        self._reopen(touched)

    def _start_newer(self, g: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The slot of each row (communicator ``g``, call ``seq``), and the slots that rows of
        a newer call than theirs reached: those start that call afresh, their cells empty (an
        open call they held is counted as evicted)."""
        slot = g * self.W + seq % self.W
        uslots, inv = distinct_inverse(slot)
        newest = np.full(len(uslots), -1, dtype=np.int64)
        np.maximum.at(newest, inv, seq)
        fresh = newest > self.s_seq[uslots]
        fs = uslots[fresh]
        if len(fs):
            self.evicted_open += int(((self.s_seq[fs] >= 0) & ~self.s_closed[fs]).sum())
            self.s_seq[fs] = newest[fresh]
            self.s_closed[fs] = False
            self._reopen(fs)
            idx, _ = self.slot_cells(fs)
            self.c_enter[idx] = _MISSING
            self.c_end[idx] = _MISSING
            self.c_own[idx] = _MISSING
            self.c_status[idx] = -1
        return slot, fs

    def _reopen(self, slots: np.ndarray) -> None:
        """Mark again whether each of ``slots`` is open (after its counts or state changed)."""
        self.s_open[slots] = (self.s_entered[slots] > 0) & ~self.s_closed[slots]

    def _recount(self, slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Recount the members that entered and ended each slot of ``slot``; the distinct
        slots and their member counts."""
        touched = distinct(slot)
        idx, n = self.slot_cells(touched)
        starts = np.cumsum(n) - n
        self.s_entered[touched] = np.add.reduceat((self.c_enter[idx] >= 0).astype(np.int64),
                                                  starts)
        self.s_ended[touched] = np.add.reduceat((self.c_end[idx] >= 0).astype(np.int64), starts)
        return touched, n

    # ----- read back ------------------------------------------------------------------------
    def read(self, slots: np.ndarray) -> list[Finished]:
        """Finished instances grouped by communicator size, sorted by (communicator, seq)."""
        out: list[Finished] = []
        if len(slots) == 0:
            return out
        g = slots // self.W
        order = np.lexsort((self.s_seq[slots], g))
        slots, g = slots[order], g[order]
        n = self.n[g]
        for size in np.unique(n).tolist():
            sel = n == size
            s = slots[sel]
            gg = g[sel]
            start = self.base[gg] + (s % self.W) * size
            idx = start[:, None] + np.arange(size)[None, :]
            out.append(Finished(s, gg, self.s_seq[s], self.c_enter[idx], self.c_end[idx],
                                self.c_own[idx], self.c_status[idx]))
        return out

    def open_slots(self) -> np.ndarray:
        """Slots holding an instance that some member entered and that has not finished."""
        return np.flatnonzero(self.s_open[: len(self.names) * self.W])

    def entered(self, pg: np.ndarray, seq: np.ndarray, src: np.ndarray,
                dst: np.ndarray) -> np.ndarray:
        """The later entry of ``src`` and ``dst`` into instance ``seq`` of communicator ``pg``
        (its point-to-point channel src -> dst if there is one), -1 when unknown."""
        n = len(pg)
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or not self.names:
            return out
        key = (pg.astype(np.int64) << (2 * _RANK_BITS)) | (src.astype(np.int64) << _RANK_BITS) \
            | dst.astype(np.int64)
        uniq, inv = distinct_inverse(key)
        chan = np.array([self._channels.get(k, -1) for k in uniq.tolist()], dtype=np.int64)[inv]
        up, pinv = distinct_inverse(pg)
        coll = np.array([self._by_pg.get(p, -1) for p in up.tolist()], dtype=np.int64)[pinv]
        g = np.where(chan >= 0, chan, coll)
        ok = g >= 0
        if not ok.any():
            return out
        rows = np.flatnonzero(ok)
        g, sq = g[rows], seq[rows]
        slot = g * self.W + sq % self.W
        live = self.s_seq[slot] == sq
        best = np.full(len(rows), -1, dtype=np.int64)
        for end in (src[rows], dst[rows]):
            pos = np.where(self.p2p[g], np.where(end == src[rows], 0, 1),
                           self.positions(g, end))
            cell = self.base[g] + (sq % self.W) * self.n[g] + np.maximum(pos, 0)
            val = np.where(live & (pos >= 0), self.c_enter[np.minimum(cell, self.cells - 1)], -1)
            best = np.maximum(best, val)
        out[rows] = best
        return out
