"""Who the others wait for, from progress records (trace format version 2).

With one call in K kept, the kept calls of a communicator that meets a slow rank once an
iteration (a data-parallel all-reduce) are too few to judge: at K = 64 a few per minute. Every
member's progress, though, says at the end of every window whether it is inside a call
(entered more than it completed), whatever K is. At the window's end, the members of a
collective that are inside it are waiting for those that have not entered it yet. A member
that is outside, while at least half of its peers are inside, snapshot after snapshot from
some moment on, is the one they wait for: a slow GPU in its tensor-parallel group, each rank
of a slow host in its data-parallel group, where its replicas' kept calls would compare only
the waits it imposes on them.

Each window's snapshot counts once two later windows' records have come (rows of one window
arrive in pieces, from every node's sidecar); a member without a row in a window did not move,
so its state is that of its last row. Only snapshots in which the member's peers mostly wait
are informative; each member's last ``history`` of those are judged by the change-point test
of own time (``series``), against the rate at which members of communicators of its size are
the one waited for.

Send/recv channels are snapshotted too: a side inside its transfer while the other is inside
no call waits for that other. Per rank, how often its pipeline neighbours waited for it,
beyond its replicas (``held``), tells the slow stage of a pipeline from the stages it holds
back, whose replicas may wait for them as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.distinct import distinct
from diagnosis.engine.series import CHANGE_LEAST, binom_logsf, change_point, on_slow_rows

# snapshots a member needs before a change: one slow from the first on is judged by the other
# detectors (its peers' waits are its role there, as far as this test can tell)
_MIN_BEFORE = 6
# a snapshot is informative for a member when at least this share of its peers is inside
_PEERS_INSIDE = 0.5
# the least share of informative snapshots after the change in which it is the one waited for:
# the cause of its peers' waits is the one missing at nearly all of them; a rank held back now
# and then by what it depends on (a slow transfer of its host's, a pipeline stage it follows)
# was found missing at half of them or fewer
_MIN_FRAC = 0.7
# ... and more than half beyond chance (a one-sided binomial test at this level): windows that
# fall at about the same point of every iteration catch a communicator met once an iteration
# inside its call only now and then, and at those few the slowest of healthy replicas is the
# one outside at five of seven
_MORE_THAN_HALF = 0.05


@dataclass(frozen=True)
class Waited:
    """A member its peers wait for from ``onset_ns`` on: it was outside while they were inside
    at ``hits`` of the ``count`` informative snapshots since (``pre_frac`` of those before), of
    ``snapshots`` in all since; ``share``: the part of all snapshots since in which they waited
    for it (its extra time over a window, as a fraction)."""
    rank: int
    group: int
    onset_ns: int
    hits: int
    count: int
    pre_frac: float
    snapshots: int
    share: float
    logp: float


class WaitBoard:
    """Per member of every collective communicator: its latest inside state and its last
    ``history`` informative snapshots."""

    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.H = config.history
        self.off = np.zeros(0, dtype=np.int64)      # each group's first member row
        self.size = 0
        self.inside = np.zeros(0, dtype=np.int64)   # -1: not known yet
        self.rank_of = np.zeros(0, dtype=np.int64)  # each member row's global rank
        self.busy = np.zeros(0, dtype=np.int64)     # per rank, the calls it is inside
        # per rank, the snapshots at which the other side of one of its send/recv channels was
        # inside their transfer while it was inside no call (see ``held``)
        self.held_p2p = np.zeros(0, dtype=np.int64)
        self.y = np.zeros((0, self.H), dtype=np.float32)  # 1: waited for, 0: not, nan
        self.t = np.zeros((0, self.H), dtype=np.int64)      # per group, per column
        self.snaps = np.zeros((0, self.H), dtype=np.int64)  # snapshots a column stands for
        self.cols = np.zeros(0, dtype=np.int64)     # per group, columns written
        self.since = np.zeros(0, dtype=np.int64)    # per group, snapshots since the last column
        self._pend: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(4)]
        self._ends = np.zeros(0, dtype=np.int64)    # the newest window ends seen
        self._taken = -1                            # the newest window snapshotted

    def _ensure(self) -> None:
        G = len(self.arena)
        if len(self.off) >= G:
            return
        sizes = self.arena.n[len(self.off):G]
        new_off = self.size + np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
        self.off = np.r_[self.off, new_off]
        self.size += int(sizes.sum())
        grow = self.size - len(self.inside)
        self.inside = np.r_[self.inside, np.full(grow, -1, dtype=np.int64)]
        self.rank_of = np.concatenate([self.rank_of, *(
            self.arena.members[g].astype(np.int64) for g in range(G - len(sizes), G))])
        self.y = np.vstack([self.y, np.full((grow, self.H), np.nan, dtype=np.float32)])
        add = G - len(self.cols)
        self.t = np.vstack([self.t, np.zeros((add, self.H), dtype=np.int64)])
        self.snaps = np.vstack([self.snaps, np.zeros((add, self.H), dtype=np.int64)])
        self.cols = np.r_[self.cols, np.zeros(add, dtype=np.int64)]
        self.since = np.r_[self.since, np.zeros(add, dtype=np.int64)]

    def update(self, g: np.ndarray, pos: np.ndarray, entered: np.ndarray,
               completed: np.ndarray, t: np.ndarray) -> None:
        """Take progress rows (member ``pos`` of communicator or channel ``g`` at the end of a
        window ``t``). A window is taken as complete once rows of two later windows have
        come (the sidecars of a job deliver a window's rows a little apart); a row of a window
        already taken only sets its member's state."""
        if not len(g):
            return
        inside = ((entered >= 0) & (entered > completed)).astype(np.int64)
        self._pend = [np.r_[a, b] for a, b in zip(self._pend, (g, pos, t, inside),
                                                  strict=True)]
        self._ends = np.union1d(self._ends, distinct(t))[-3:]
        if len(self._ends) < 3:
            return
        ready = self._pend[2] < self._ends[-2]
        if not ready.any():
            return
        rows = [a[ready] for a in self._pend]
        self._pend = [a[~ready] for a in self._pend]
        self._ensure()
        gg, pp, tt, ii = rows
        o = np.lexsort((pp, gg, tt))
        gg, pp, tt, ii = gg[o], pp[o], tt[o], ii[o]
        cuts = np.flatnonzero(np.r_[True, tt[1:] != tt[:-1], True])
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            late = int(tt[a]) <= self._taken
            self._snapshot(gg[a:b], pp[a:b], ii[a:b], int(tt[a]), state_only=late)
            self._taken = max(self._taken, int(tt[a]))

    def _snapshot(self, g: np.ndarray, pos: np.ndarray, inside: np.ndarray, t: int,
                  state_only: bool = False) -> None:
        """One window's rows (sorted by group and member): set the members' states, then
        snapshot each collective that had a row (one with none did not move: the same
        snapshot again)."""
        row = self.off[g] + pos
        last = np.r_[row[1:] != row[:-1], True]      # (a member's last row of the window)
        row, g, pos, inside = row[last], g[last], pos[last], inside[last]
        rank = self.rank_of[row]
        self._grow_busy(rank)
        np.add.at(self.busy, rank, inside - np.maximum(self.inside[row], 0))
        self.inside[row] = inside
        coll = ~self.arena.p2p[g]
        if state_only:
            return
        if not coll.all():
            self._channels(g[~coll])
        if not coll.any():
            return
        g = g[coll]
        groups = g[np.r_[True, g[1:] != g[:-1]]]
        n = self.arena.n[groups]
        rows = np.repeat(self.off[groups], n) + (np.arange(int(n.sum()))
                                                 - np.repeat(np.cumsum(n) - n, n))
        state = self.inside[rows].astype(np.float64)
        known = state >= 0
        starts = np.r_[0, np.cumsum(n)[:-1]]
        ins = np.add.reduceat(np.where(known, state, 0.0), starts)
        cnt = np.add.reduceat(known.astype(np.float64), starts)
        own = np.where(known, state, 0.0)
        peers = np.repeat(cnt, n) - known
        with np.errstate(invalid="ignore", divide="ignore"):
            share = (np.repeat(ins, n) - own) / peers
        informative = known & (peers >= 1) & (share >= _PEERS_INSIDE)
        # waited for: outside, and inside no other call (a rank that waits elsewhere, for a
        # pipeline stage before it, is that stage's victim)
        members = self.rank_of[rows]
        self._grow_busy(members)
        free = (own == 0) & (self.busy[members] == 0)
        self.since[groups] += 1
        # a column per group in which some member's peers waited
        hit = np.add.reduceat(informative.astype(np.int64), starts) > 0
        if not hit.any():
            return
        col_g = groups[hit]
        c = self.cols[col_g] % self.H
        self.t[col_g, c] = t
        self.snaps[col_g, c] = self.since[col_g]
        self.since[col_g] = 0
        self.cols[col_g] += 1
        mine = np.repeat(hit, n)
        val = np.where(informative, free.astype(np.float64), np.nan)[mine]
        self.y[rows[mine], np.repeat(c, n[hit])] = val

    def _channels(self, g: np.ndarray) -> None:
        """Snapshot send/recv channels that had a row: a side inside its transfer while the
        other is inside no call waits for that other (a receiver for data not computed yet,
        a sender for a receiver that has not come)."""
        g = distinct(g)
        g = g[self.arena.n[g] == 2]
        a, b = self.off[g], self.off[g] + 1
        ra, rb = self.rank_of[a], self.rank_of[b]
        self._grow_busy(np.r_[ra, rb])
        sa, sb = self.inside[a], self.inside[b]
        free_a = (sa == 0) & (self.busy[ra] == 0)
        free_b = (sb == 0) & (self.busy[rb] == 0)
        np.add.at(self.held_p2p, ra[free_a & (sb == 1)], 1)
        np.add.at(self.held_p2p, rb[free_b & (sa == 1)], 1)

    def held(self, rank: int, group: int) -> float:
        """How many more snapshots than the members of ``group`` (its replicas, in the same
        role) the other sides of ``rank``'s send/recv channels waited for it: a pipeline stage
        that computes slowly keeps the stages before and after it waiting; a stage held back
        by it waits itself, inside its transfers."""
        n = len(self.held_p2p)
        if rank >= n:
            return 0.0
        peers = self.arena.members[group].astype(np.int64)
        seen = self.held_p2p[np.minimum(peers, n - 1)] * (peers < n)
        return float(self.held_p2p[rank] - np.median(seen))

    def _grow_busy(self, ranks: np.ndarray) -> None:
        top = int(ranks.max()) + 1 if len(ranks) else 0
        if top > len(self.busy):
            grow = np.zeros(top - len(self.busy), dtype=np.int64)
            self.busy = np.r_[self.busy, grow]
            self.held_p2p = np.r_[self.held_p2p, grow]

    def judge(self) -> list[Waited]:
        """The members waited for from some moment on, per size of communicator."""
        self._ensure()
        cfg = self.cfg
        out: list[Waited] = []
        coll = np.flatnonzero(~self.arena.p2p[: len(self.cols)] & (self.cols > 0))
        if not len(coll):
            return out
        H = self.H
        for size in np.unique(self.arena.n[coll]).tolist():
            groups = coll[self.arena.n[coll] == size]
            groups = groups[self.cols[groups] >= cfg.slow_min_samples]
            if not len(groups):
                continue
            # oldest column first, per group
            order = (self.cols[groups][:, None] + np.arange(H)[None, :]) % H
            filled = np.arange(H)[None, :] >= H - np.minimum(self.cols[groups], H)[:, None]
            rows = np.repeat(self.off[groups], size) + np.tile(np.arange(size), len(groups))
            cols = np.repeat(order, size, axis=0)
            y = np.where(np.repeat(filled, size, axis=0),
                         np.take_along_axis(self.y[rows], cols, axis=1), np.nan)
            t = np.take_along_axis(self.t[groups], order, axis=1)
            snaps = np.where(filled, np.take_along_axis(self.snaps[groups], order, axis=1), 0)
            valid = ~np.isnan(y)
            rate = (np.nansum(y, axis=1) / np.maximum(valid.sum(axis=1), 1))[
                valid.sum(axis=1) > 0]
            if not len(rate):
                continue
            p0 = min(max(float(np.median(rate)), cfg.slow_base_rate), 0.5)
            thr = np.full(len(y), 0.5)
            res = on_slow_rows(change_point, CHANGE_LEAST, y, thr, np.full(len(y), p0),
                               cfg.slow_min_samples)
            # every snapshot before the onset, informative or not (peers that never waited
            # for anyone are a healthy past too)
            before = np.cumsum(snaps, axis=1)[np.repeat(np.arange(len(groups)), size),
                                               np.maximum(res.start, 0)] - 1
            ok = (res.start >= 0) & (res.logp < np.log(cfg.slow_alpha_member)) \
                & (before >= _MIN_BEFORE) & (res.frac >= _MIN_FRAC) \
                & (res.frac - res.pre_frac >= cfg.slow_min_frac)
            cand = np.flatnonzero(ok)
            if len(cand):
                n_after = res.count[cand]
                hits = np.rint(res.frac[cand] * n_after).astype(np.int64)
                ok[cand] = binom_logsf(hits, n_after, np.full(len(cand), 0.5)) \
                    < np.log(_MORE_THAN_HALF)
            for i in np.flatnonzero(ok).tolist():
                gi, pos = divmod(i, size)
                s = int(res.start[i])
                hits = int(np.nansum(y[i, s:]))
                total = int(snaps[gi, s:].sum()) + int(self.since[groups[gi]])
                g = int(groups[gi])
                out.append(Waited(int(self.arena.members[g][pos]), g, int(t[gi, s]), hits,
                                  int(res.count[i]), float(res.pre_frac[i]), total,
                                  hits / max(total, 1), float(res.logp[i])))
        return out
