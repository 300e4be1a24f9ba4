"""Late together across communicators: lateness at kept calls that another communicator explains.

A member's lateness at a kept call counts the time since its previous call, whichever
communicator that was in. The first tensor-parallel call after the data-parallel all-reduce is
entered when each GPU's own all-reduce ends, and a data-parallel ring ends late for all its
members at once (a ring is as slow as its slowest link: ECMP collisions, a busy rail). So a GPU
of a ring that ends late is late there in its tensor-parallel group, call after call, and so is
every other member of that ring in its own group at the same call (every group of a size runs
the same calls in the same order: the same sequence numbers). A slow GPU is late alone: the
members of its data-parallel ring wait for it inside the all-reduce and leave it together.

This keeps, per communicator size, each member's lateness at the kept calls of the last
sequence numbers, and tells whether a member's late calls were calls at which the members of
one of its other communicators, in their own groups, were late as well.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from diagnosis.engine.arena import Arena

# rows kept per communicator size (sequence number, rank, lateness): a few dozen kept calls of
# every group at 4,096 GPUs, the last few at 131,072
_MAX_ROWS = 1 << 20
# a member's late calls are another communicator's doing when, at half of them at least (and
# two), the members of that communicator present at the same call were late by half as much
_SHARED = 0.5


class CoLateness:
    """Per communicator size, the lateness of every member at recent kept calls."""

    def __init__(self, arena: Arena, max_rows: int = _MAX_ROWS) -> None:
        self.arena = arena
        self.max_rows = max_rows
        self._parts: dict[int, deque[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._rows: dict[int, int] = {}
        self._of: dict[int, list[int]] = {}     # rank -> its collective communicators
        self._cat: dict[int, tuple[np.ndarray, ...]] = {}   # per size, its rows in one piece
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # see ``_members``
        self._known = 0

    def add(self, group: np.ndarray, seq: np.ndarray, late: np.ndarray) -> None:
        """Kept collective calls of one size: their communicators, sequence numbers and each
        member's lateness (calls along axis 0, members along axis 1)."""
        if not len(group):
            return
        n = late.shape[1]
        ranks = self._members(n, group).ravel()
        part = (np.repeat(seq.astype(np.int64), n), ranks.astype(np.int64),
                late.astype(np.float32).ravel())
        parts = self._parts.setdefault(n, deque())
        parts.append(part)
        self._cat.pop(n, None)
        self._rows[n] = self._rows.get(n, 0) + len(ranks)
        while self._rows[n] > self.max_rows and len(parts) > 1:
            self._rows[n] -= len(parts.popleft()[0])

    def _members(self, n: int, group: np.ndarray) -> np.ndarray:
        """The members of communicators ``group``, all of size ``n``, a row each. Kept per
        size: a row per communicator of that size, and per communicator id its row (-1: another
        size), extended as communicators are added. (A row for every id, send/recv channels
        included, times the size of the largest group took gigabytes at 131,072 ranks.)"""
        row_of, tab = self._tables.get(n, (np.zeros(0, dtype=np.int64),
                                           np.zeros((0, n), dtype=np.int64)))
        known = len(self.arena.members)
        if len(row_of) < known:
            fresh = np.arange(len(row_of), known)
            fresh = fresh[self.arena.n[fresh] == n]
            more = np.full(known - len(row_of), -1, dtype=np.int64)
            more[fresh - len(row_of)] = len(tab) + np.arange(len(fresh))
            row_of = np.r_[row_of, more]
            if len(fresh):
                tab = np.vstack([tab, np.stack([self.arena.members[g] for g in fresh.tolist()])])
            self._tables[n] = (row_of, tab)
        return tab[row_of[group]]

    def _communicators(self, rank: int) -> list[int]:
        known = len(self.arena.members)
        for g in range(self._known, known):
            if not self.arena.p2p[g]:
                for r in self.arena.members[g].tolist():
                    self._of.setdefault(r, []).append(g)
        self._known = known
        return self._of.get(rank, [])

    def shared(self, rank: int, group: int, least: float) -> bool:
        """Whether ``rank``'s calls in ``group`` at which it came at least ``least`` late
        (in the group's pace) were, at half of them or more, calls at which the members of
        another of its communicators were late too (their median, by ``least``), and at the
        median such call."""
        n = int(self.arena.n[group])
        parts = self._parts.get(n)
        if not parts:
            return False
        if n not in self._cat:
            self._cat[n] = tuple(np.concatenate(c) for c in zip(*parts, strict=True))
        seq, ranks, late = self._cat[n]
        mine = ranks == rank
        late_at = np.unique(seq[mine & (late >= least)])
        if len(late_at) < 2:
            return False
        at = np.isin(seq, late_at)
        seq, ranks, late = seq[at], ranks[at], late[at]
        judged = np.zeros(len(late_at), dtype=bool)
        their = np.full(len(late_at), -np.inf)      # the latest other communicator's median
        for g in self._communicators(rank):
            if g == group:
                continue
            peers = self.arena.members[g]
            sel = np.isin(ranks, peers) & (ranks != rank)
            if not sel.any():
                continue
            i = np.searchsorted(late_at, seq[sel])
            count = np.bincount(i, minlength=len(late_at))
            for k in np.flatnonzero(count >= 2).tolist():
                judged[k] = True
                their[k] = max(their[k], float(np.median(late[sel][i == k])))
        shared = their >= least
        # and late at the typical call judged: a few calls a communicator of four shares by
        # chance (of a dozen rows, early and late) explain nothing
        return int(judged.sum()) >= 2 and int(shared.sum()) >= max(2, _SHARED * judged.sum()) \
            and float(np.median(their[judged])) >= least
