"""``progress`` records: how far each rank has got on each communicator, per window.

Key: (rank, communicator) for collectives; (rank, communicator, direction, peer) for
point-to-point calls, whose ``seq`` counts the messages of one direction between one pair
(``send`` and ``isend`` share the counter, so they share the key). Value at a window's end: the
highest seq entered and the highest completed by then. A record is made only for a window in
which either changed, so a rank that stops making progress stops emitting.

Events are a call's entry (``t_enter_ns``) and its completion (``t_end_ns``, status ok: a call
that failed or timed out did not complete). Both values are maxima, so feeding the same call
twice (an open row, then its completed row) changes nothing; an event may be fed early, before
the watermark reaches it, and waits for its window.
"""

from __future__ import annotations

import logging

import numpy as np

from c4.proto.codec import Columns
from c4.reduce.keys import RowIds, Strings
from c4.reduce.windows import NO_END, Windows

log = logging.getLogger(__name__)

NONE = -1
PROGRESS_FIELDS = ("rank", "pg", "op", "peer", "t_ns", "entered", "completed")


def direction(op_name: str) -> str | None:
    """``send`` or ``recv`` for a point-to-point op name however the recorder spelled it
    (``send``, ``isend``, ``Send``, ``irecv``...), None for a collective."""
    name = op_name.lower()
    if name.endswith("send"):
        return "send"
    if name.endswith("recv"):
        return "recv"
    return None


class ProgressReducer:
    """Streaming progress: :meth:`add` events (any order, any time ahead of the watermark),
    :meth:`close` windows in order."""

    def __init__(self, windows: Windows, strings: Strings) -> None:
        self.windows = windows
        self.strings = strings
        self.keys = RowIds(4)           # rank, pg, op (direction id or -1), peer (-1)
        self.entered = np.empty(0, np.int64)
        self.completed = np.empty(0, np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.next_window: int | None = None   # first window not closed yet
        self.late = 0                         # events that came after their window closed

    def add(self, ops: Columns) -> None:
        """Entry events of every row, and completion events of the rows completed ok."""
        n = len(ops)
        if not n:
            return
        pg = self.strings.remap(ops.strings, ops["pg"])
        dirs = [direction(s) for s in ops.strings]
        dir_id = np.array([NONE if d is None else self.strings.id(d) for d in dirs] + [NONE],
                          dtype=np.int64)[np.asarray(ops["op"], dtype=np.int64)]
        p2p = dir_id != NONE
        peer = np.where(p2p, np.asarray(ops["peer"], dtype=np.int64), NONE)
        key = self.keys.ids(np.asarray(ops["rank"], dtype=np.int64), pg, dir_id, peer)
        self._grow()
        seq = np.asarray(ops["seq"], dtype=np.int64)
        t_end = np.asarray(ops["t_end_ns"], dtype=np.int64)
        done = (t_end >= 0) & (np.asarray(ops["status"]) == 0)
        w_enter = self.windows.index(ops["t_enter_ns"])
        w_done = self.windows.index(t_end[done])
        self._pending.append(_highest(np.concatenate([key, key[done]]),
                                      np.concatenate([w_enter, w_done]),
                                      np.concatenate([seq, seq[done]]),
                                      np.concatenate([np.zeros(n, bool),
                                                      np.ones(len(w_done), bool)])))

    def close(self, limit: int, stop_ns: int = NO_END) -> dict[str, np.ndarray]:
        """Close the windows before ``limit``; the records of those in which a key changed,
        by window then key. ``stop_ns`` cuts the last window short (the stream's end)."""
        key, win, seq, done = self._take(limit)
        out: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]] = []
        order = np.argsort(win, kind="stable")
        key, win, seq, done = key[order], win[order], seq[order], done[order]
        bounds = np.flatnonzero(np.diff(win)) + 1
        for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(win)].tolist()):
            if lo == hi:
                continue
            k, s, d = key[lo:hi], seq[lo:hi], done[lo:hi]
            touched = np.flatnonzero(np.bincount(k, minlength=len(self.entered)))
            before_e, before_c = self.entered[touched], self.completed[touched]
            np.maximum.at(self.entered, k[~d], s[~d])
            np.maximum.at(self.completed, k[d], s[d])
            changed = (self.entered[touched] != before_e) | (self.completed[touched] != before_c)
            ids = touched[changed]
            # the values at this window's end: a later window of the same close raises them
            out.append((ids, int(win[lo]), self.entered[ids], self.completed[ids]))
        if self.next_window is None or limit > self.next_window:
            self.next_window = limit
        return self._records(out, stop_ns)

    # ----- internals -------------------------------------------------------------------------
    def _grow(self) -> None:
        extra = len(self.keys) - len(self.entered)
        if extra > 0:
            self.entered = np.concatenate([self.entered, np.full(extra, NONE, np.int64)])
            self.completed = np.concatenate([self.completed, np.full(extra, NONE, np.int64)])

    def _take(self, limit: int) -> tuple[np.ndarray, ...]:
        """The pending events of windows before ``limit`` (late ones moved to the first open
        window: a maximum that arrives late still counts, only later)."""
        if not self._pending:
            return tuple(np.empty(0, t) for t in (np.int64, np.int64, np.int64, bool))
        key, win, seq, done = (np.concatenate(c) for c in zip(*self._pending))
        if self.next_window is not None:
            late = win < self.next_window
            if late.any():
                # a late event already reflected in the state (the completed row of a call
                # whose open row counted its entry) changes nothing: drop it; one that would
                # raise a maximum still counts, in the first open window
                state = np.where(done, self.completed[key], self.entered[key])
                stale = late & (seq <= state)
                late &= ~stale
                self.late += int(late.sum())
                if late.any():
                    log.debug("%d progress events came after their window closed",
                              int(late.sum()))
                keep = ~stale
                key, win, seq, done = key[keep], win[keep], seq[keep], done[keep]
                win = np.where(late[keep], self.next_window, win)
        now = win < limit
        rest = ~now
        self._pending = [(key[rest], win[rest], seq[rest], done[rest])] if rest.any() else []
        return key[now], win[now], seq[now], done[now]

    def _records(self, out: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]],
                 stop_ns: int) -> dict[str, np.ndarray]:
        if not out:
            return {name: np.empty(0, np.int64) for name in PROGRESS_FIELDS}
        ids = np.concatenate([o[0] for o in out])
        wins = np.concatenate([np.full(len(o[0]), o[1], np.int64) for o in out])
        cols = [self.keys.column(j)[ids] for j in range(4)]
        return {"rank": cols[0], "pg": cols[1], "op": cols[2], "peer": cols[3],
                "t_ns": self.windows.end(wins, stop_ns),
                "entered": np.concatenate([o[2] for o in out]),
                "completed": np.concatenate([o[3] for o in out])}


def _highest(key: np.ndarray, win: np.ndarray, seq: np.ndarray, done: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The events reduced to the highest seq per (key, window, kind): only maxima matter, and a
    batch holds hundreds of calls per key, so this keeps the pending events few."""
    if not len(key):
        return key, win, seq, done
    w0 = int(win.min())
    cells = (int(win.max()) - w0 + 1) * (int(key.max()) + 1) * 2
    if cells > 4 * len(key) + (1 << 16):    # sparse: a dense table would cost more
        return key, win, seq, done
    nkey = int(key.max()) + 1
    flat = ((win - w0) * nkey + key) * 2 + done
    best = np.full(cells, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(best, flat, seq)
    cell = np.flatnonzero(best != np.iinfo(np.int64).min)
    kind = cell % 2
    rest = cell // 2
    return rest % nkey, rest // nkey + w0, best[cell], kind.astype(bool)
