"""Progress records (trace format version 2): how far each rank has got on each communicator.

When calls are sampled, a call that hangs is usually one the stream left out, so no op row
shows who waits in it. Each rank's progress does: the highest seq it entered and the highest it
completed, per communicator (per send/recv channel, with the per-pair seqs). A rank that entered
more than it completed is inside the next call; its peers are inside it too, done with it, or
absent from it. This board keeps every member's latest progress and writes those calls into the
arena as instances with approximate times (the end of the window that first showed the change),
so the hang detectors judge them as they judge op rows: who never came, who waits, for how long.
"""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena

_NONE = -1


class ProgressBoard:
    """Per (communicator or channel, member): the latest entered and completed seq, and since
    when (the record that first showed each)."""

    def __init__(self, arena: Arena) -> None:
        self.arena = arena
        self.off = np.zeros(0, dtype=np.int64)     # each group's first member row
        self.size = 0
        self.entered = np.zeros(0, dtype=np.int64)
        self.completed = np.zeros(0, dtype=np.int64)
        self.t_entered = np.zeros(0, dtype=np.int64)
        self.t_completed = np.zeros(0, dtype=np.int64)
        # the first completed count seen and when: the member's mean period since
        self.first_completed = np.zeros(0, dtype=np.int64)
        self.t_first = np.zeros(0, dtype=np.int64)
        # instances written from progress that are still open: (group, seq) as slots
        self._open = np.zeros(0, dtype=np.int64)
        self.newest = -1          # the latest record time seen: how far the progress stream goes

    def _ensure(self) -> None:
        G = len(self.arena)
        if len(self.off) >= G:
            return
        sizes = self.arena.n[len(self.off):G]
        new_off = self.size + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.off = np.r_[self.off, new_off]
        need = self.size + int(sizes.sum())
        if need > len(self.entered):
            cap = max(need, 2 * len(self.entered), 1024)
            for name in ("entered", "completed", "t_entered", "t_completed",
                         "first_completed", "t_first"):
                old = getattr(self, name)
                arr = np.full(cap, _NONE, dtype=np.int64)
                arr[: len(old)] = old
                setattr(self, name, arr)
        self.size = need

    def update(self, g: np.ndarray, pos: np.ndarray, entered: np.ndarray,
               completed: np.ndarray, t: np.ndarray) -> None:
        """Take progress rows (a member ``pos`` of group ``g`` at ``t``). Rows may come out of
        order: a count only grows, and its time is the earliest record that showed it."""
        self._ensure()
        if len(t):
            self.newest = max(self.newest, int(t.max()))
        row = self.off[g] + pos
        first = (self.first_completed[row] < 0) & (completed >= 0)
        if first.any():
            r, c, tt = row[first], completed[first], t[first]
            o = np.lexsort((c, tt, r))
            r, c, tt = r[o], c[o], tt[o]
            head = np.r_[True, r[1:] != r[:-1]]
            self.first_completed[r[head]] = c[head]
            self.t_first[r[head]] = tt[head]
        for val, have, since in ((entered, self.entered, self.t_entered),
                                 (completed, self.completed, self.t_completed)):
            grew = val > have[row]
            if not grew.any():
                continue
            # per member the largest value, and the earliest time it was seen at
            r, v, tt = row[grew], val[grew], t[grew]
            o = np.lexsort((tt, -v, r))
            r, v, tt = r[o], v[o], tt[o]
            first = np.r_[True, r[1:] != r[:-1]]
            have[r[first]] = v[first]
            since[r[first]] = tt[first]

    def period(self, groups: np.ndarray, min_calls: int = 4) -> np.ndarray:
        """Each group's mean time between calls (ns) over what its first member has completed
        since its first progress record; NaN with fewer than ``min_calls`` calls. Every call
        counts, sampled or not: the communicator's pace even when hardly any call is kept."""
        self._ensure()
        out = np.full(len(groups), np.nan)
        if not len(groups) or not len(self.off):
            return out
        g = np.asarray(groups, dtype=np.int64)
        known = g < len(self.off)
        row = self.off[g[known]]
        calls = self.completed[row] - self.first_completed[row]
        span = self.t_completed[row] - self.t_first[row]
        ok = (self.first_completed[row] >= 0) & (calls >= min_calls)
        per = np.full(len(row), np.nan)
        per[ok] = span[ok] / calls[ok]
        out[known] = per
        return out

    def pending(self, g: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The groups and seqs of the oldest call each given member is inside (entered and not
        completed), for the members that are inside one."""
        self._ensure()
        row = self.off[g] + pos
        inside = self.entered[row] > self.completed[row]
        return g[inside], self.completed[row[inside]] + 1

    def write(self, groups: np.ndarray, seqs: np.ndarray, skip: np.ndarray | None = None) -> None:
        """Write instances (group, seq) into the arena, each member's cell from its progress;
        and refresh the ones written earlier that are still open. ``skip``: instances not to
        write (calls whose op rows the stream keeps)."""
        self._ensure()
        a = self.arena
        if skip is not None and len(skip):
            groups, seqs = groups[~skip], seqs[~skip]
        slots = groups * a.W + seqs % a.W
        keys = np.r_[self._open, slots]
        seq_of = np.r_[a.s_seq[self._open], seqs]
        # distinct (slot, seq) pairs, sorted (a 2-D unique sorts structured rows, far slower)
        o = np.lexsort((seq_of, keys))
        keys, seq_of = keys[o], seq_of[o]
        head = np.ones(len(keys), dtype=bool)
        head[1:] = (keys[1:] != keys[:-1]) | (seq_of[1:] != seq_of[:-1])
        slots, seqs = keys[head], seq_of[head]
        live = (seqs >= 0) & ((a.s_seq[slots] < seqs) | ~a.s_closed[slots])
        slots, seqs = slots[live], seqs[live]
        if not len(slots):
            self._open = slots
            return
        g = slots // a.W
        n = a.n[g]
        total = int(n.sum())
        gg = np.repeat(g, n)
        ss = np.repeat(seqs, n)
        pos = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
        row = self.off[gg] + pos
        done = self.completed[row] >= ss
        inside = self.entered[row] >= ss
        enter = np.where(inside, self.t_entered[row], _NONE)
        # a member done with a call entered it no later than it left it
        enter = np.where(done & (enter < 0), self.t_completed[row], enter)
        end = np.where(done, np.maximum(self.t_completed[row], enter), _NONE)
        a.fill(gg, pos, ss, enter, end, np.full(total, _NONE, dtype=np.int64))
        still = (a.s_seq[slots] == seqs) & ~a.s_closed[slots]
        self._open = slots[still]
