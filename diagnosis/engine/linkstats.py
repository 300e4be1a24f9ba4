"""Window statistics of connections (trace format version 2 ``linkstat``) as connection evidence.

A window's transfers become one sample of the connection: their mean duration over their mean
size (``busy_ns / bytes``: time per byte, what a transfer record gives), so the connection's
slowness series, its peers and its lossy count work as with per-transfer records. The transfers
still in flight at the window's end are the connection's open transfers, replaced by each newer
window of the connection; a connection that has no record for a whole window had nothing in
flight at its end (records are written for every window in which something completed or was
open), so its open transfers are dropped once the stream has moved past that window.
"""

from __future__ import annotations

import numpy as np

from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.records import ConnRecords, LinkStatRecords


class LinkStatFeed:
    """Turns linkstat batches into samples and open transfers of a :class:`ConnWindow`."""

    def __init__(self, win: ConnWindow) -> None:
        self.win = win
        self.last_t = np.zeros(0, dtype=np.int64)        # per key: end of its newest window
        self.window = np.zeros(0, dtype=np.int64)        # per key: its window length
        self.newest = -1                                  # end of the newest window seen

    def add(self, recs: LinkStatRecords, pg_ids: np.ndarray) -> ConnRecords | None:
        """Feed a batch; returns the finished-transfer samples it gave (for the lossy-link
        detector), None when it had none."""
        win = self.win
        if len(recs) == 0:
            return None
        key = win.keys_of(recs.src, recs.dst, pg_ids)
        self._grow(len(win))
        if recs.paths is not None:
            win.set_paths(key, recs.paths)
        newer = recs.t_ns >= self.last_t[key]
        np.maximum.at(self.last_t, key, recs.t_ns)
        self.window[key[newer]] = recs.window_ns[newer]
        self.newest = max(self.newest, int(recs.t_ns.max()))
        self._replace_open(key, recs)
        done = recs.transfers > 0
        if not done.any():
            return None
        n = recs.transfers[done]
        per = ConnRecords(recs.src[done], recs.dst[done], recs.bytes[done] // n,
                          recs.t_ns[done] - recs.busy_ns[done] // n, recs.t_ns[done],
                          pg_ids[done], np.full(int(done.sum()), -1), [],
                          None, np.where(recs.retrans[done] >= 0, recs.retrans[done], 0)
                          if (recs.retrans[done] >= 0).any() else None)
        win.add_samples(per, key[done], recs.t_ns[done] - recs.window_ns[done] + 1)
        return per

    def _grow(self, size: int) -> None:
        grow = size - len(self.last_t)
        if grow > 0:
            self.last_t = np.r_[self.last_t, np.full(grow, -1, dtype=np.int64)]
            self.window = np.r_[self.window, np.zeros(grow, dtype=np.int64)]

    def _replace_open(self, key: np.ndarray, recs: LinkStatRecords) -> None:
        """The open transfers of the batch's keys are what their newest record says; keys
        silent for more than a window past their last record have none."""
        win = self.win
        latest = recs.t_ns >= self.last_t[key]
        k, since, n_open = key[latest], recs.open_since_ns[latest], recs.open[latest]
        stale = self.last_t[win.open_key] + self.window[win.open_key] < self.newest
        gone = np.isin(win.open_key, k) | stale
        is_open = (n_open > 0) & (since >= 0)
        win.set_open(win.open_key[~gone], win.open_start[~gone], win.open_seq[~gone])
        if is_open.any():
            kk, ss = np.unique(np.stack([k[is_open], since[is_open]]), axis=1)
            win.set_open(np.r_[win.open_key, kk], np.r_[win.open_start, ss],
                         np.r_[win.open_seq, np.full(len(kk), -1, dtype=np.int64)])
