"""``linkstat`` records: one connection's transfers over one window.

A connection is (src, dst, communicator). Per window: the transfers that completed in it, their
bytes, ``busy_ns`` (sum of their durations) and ``max_ns``; ``open``, the transfers in flight at
the window's end (started before it, not finished by it), the oldest since ``open_since_ns``;
``retrans`` summed over the completed ones that counted it (-1: none did); ``path`` of the
latest-started transfer the record counts. A record only for a window in which something
completed or was open, so a stuck transfer shows as ``open`` in every window until the stream
ends, and an idle connection is silent.

A transfer may be fed before the watermark reaches it, completed (the simulator knows its end)
or open (a collector reporting a transfer in flight); a completed row later fed for an open one
(same connection and start) replaces it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from c4.proto.codec import Columns
from c4.reduce.keys import RowIds, Strings
from c4.reduce.windows import NO_END, Windows

log = logging.getLogger(__name__)

NONE = -1
NEVER = np.iinfo(np.int64).max     # the end window of a transfer still in flight
LINKSTAT_FIELDS = ("src", "dst", "pg", "t_ns", "window_ns", "transfers", "bytes", "busy_ns",
                   "max_ns", "open", "open_since_ns", "retrans", "path")


@dataclass
class _Spans:
    """Transfers that are open at the ends of windows ``lo .. hi-1``."""

    conn: list[np.ndarray] = field(default_factory=list)
    lo: list[np.ndarray] = field(default_factory=list)
    hi: list[np.ndarray] = field(default_factory=list)
    start: list[np.ndarray] = field(default_factory=list)
    path: list[np.ndarray] = field(default_factory=list)

    def add(self, conn, lo, hi, start, path) -> None:
        if len(conn):
            for name, v in zip(("conn", "lo", "hi", "start", "path"), (conn, lo, hi, start, path)):
                getattr(self, name).append(np.asarray(v, dtype=np.int64))

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.conn:
            return tuple(np.empty(0, np.int64) for _ in range(5))
        return tuple(np.concatenate(getattr(self, n)) for n in ("conn", "lo", "hi", "start",
                                                                 "path"))

    def keep(self, mask: np.ndarray, arrays: tuple[np.ndarray, ...]) -> None:
        for name, v in zip(("conn", "lo", "hi", "start", "path"), arrays):
            setattr(self, name, [v[mask]] if mask.any() else [])


class LinkStatReducer:
    """Streaming linkstat: :meth:`add` transfer rows, :meth:`close` windows in order."""

    def __init__(self, windows: Windows, strings: Strings) -> None:
        self.windows = windows
        self.strings = strings
        self.conns = RowIds(3)                       # src, dst, pg (-1)
        # completed transfers waiting for the window of their end
        self._done: list[tuple[np.ndarray, ...]] = []
        self._spans = _Spans()                       # completed ones, for their open windows
        self._flight: dict[tuple[int, int], tuple[int, int]] = {}  # (conn, start) -> (lo, path)
        self.next_window: int | None = None
        self.late = 0

    def add(self, rows: Columns) -> None:
        """Transfer rows: ``src``, ``dst``, ``bytes``, ``t_start_ns``, ``t_end_ns`` (-1: in
        flight); optional ``pg`` (index into ``rows.strings``, -1), ``path`` (an id the caller
        gives the route, -1), ``retrans`` (-1: not counted)."""
        n = len(rows)
        if not n:
            return
        c = rows.columns
        minus = np.full(n, NONE, np.int64)
        pg = self.strings.remap(rows.strings, c["pg"]) if "pg" in c else minus
        conn = self.conns.ids(c["src"], c["dst"], pg)
        start = np.asarray(c["t_start_ns"], dtype=np.int64)
        end = np.asarray(c["t_end_ns"], dtype=np.int64)
        path = np.asarray(c.get("path", minus), dtype=np.int64)
        retrans = np.asarray(c.get("retrans", minus), dtype=np.int64)
        lo = self.windows.index(start)
        done = end >= 0
        if self._flight and done.any():
            self._land(conn[done], start[done])
        for j in np.flatnonzero(~done).tolist():
            self._flight.setdefault((int(conn[j]), int(start[j])), (int(lo[j]), int(path[j])))
        d = np.flatnonzero(done)
        if not len(d):
            return
        w_end = self.windows.index(end[d])
        self._done.append((conn[d], w_end, np.asarray(c["bytes"], dtype=np.int64)[d],
                           end[d] - start[d], retrans[d], start[d], path[d]))
        spans = lo[d] < w_end
        self._spans.add(conn[d][spans], lo[d][spans], w_end[spans], start[d][spans],
                        path[d][spans])

    def close(self, limit: int, stop_ns: int = NO_END) -> dict[str, np.ndarray]:
        """Close the windows before ``limit``; their records, by window then connection."""
        first = self.next_window if self.next_window is not None else -NEVER
        done = self._take_done(limit, first)
        opened = self._open_at_ends(first, limit)
        if self.next_window is None or limit > self.next_window:
            self.next_window = limit
        return self._records(done, opened, stop_ns)

    # ----- internals -------------------------------------------------------------------------
    def _land(self, conn: np.ndarray, start: np.ndarray) -> None:
        """Completed rows of transfers reported in flight before: no longer in flight."""
        flying = np.fromiter((c for c, _ in self._flight), np.int64, len(self._flight))
        for j in np.flatnonzero(np.isin(conn, flying)).tolist():
            self._flight.pop((int(conn[j]), int(start[j])), None)

    def _take_done(self, limit: int, first: int) -> tuple[np.ndarray, ...]:
        if not self._done:
            return tuple(np.empty(0, np.int64) for _ in range(7))
        cols = [np.concatenate(c) for c in zip(*self._done)]
        late = cols[1] < first
        if late.any():
            # a completion reported after its window closed still counts, in the next one
            self.late += int(late.sum())
            log.debug("%d transfers completed in windows already closed", int(late.sum()))
            cols[1] = np.where(late, first, cols[1])
        now = cols[1] < limit
        self._done = [tuple(c[~now] for c in cols)] if (~now).any() else []
        return tuple(c[now] for c in cols)

    def _open_at_ends(self, first: int, limit: int) -> tuple[np.ndarray, ...]:
        """(conn, window, start, path) of each transfer open at the end of each window in
        ``[first, limit)``: completed spans and transfers still in flight."""
        spans = self._spans.arrays()
        # spans that end by the limit are done with
        self._spans.keep(spans[2] > limit, spans)
        flight = list(self._flight.items())

        def col(values: list[int]) -> np.ndarray:
            return np.asarray(values, dtype=np.int64)

        conn = np.concatenate([spans[0], col([k[0] for k, _ in flight])])
        lo = np.concatenate([spans[1], col([v[0] for _, v in flight])])
        hi = np.concatenate([spans[2], np.full(len(flight), NEVER, np.int64)])
        start = np.concatenate([spans[3], col([k[1] for k, _ in flight])])
        path = np.concatenate([spans[4], col([v[1] for _, v in flight])])
        b = np.maximum(lo, first)
        count = np.maximum(np.minimum(hi, limit) - b, 0)
        total = int(count.sum())
        if not total:
            return tuple(np.empty(0, np.int64) for _ in range(4))
        rep = np.repeat(np.arange(len(count)), count)
        offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
        return conn[rep], b[rep] + offset, start[rep], path[rep]

    def _records(self, done: tuple[np.ndarray, ...], opened: tuple[np.ndarray, ...],
                 stop_ns: int) -> dict[str, np.ndarray]:
        d_conn, d_win, d_bytes, d_dur, d_retx, d_start, d_path = done
        o_conn, o_win, o_start, o_path = opened
        conn = np.r_[d_conn, o_conn]
        win = np.r_[d_win, o_win]
        if not len(conn):
            return {name: np.empty(0, np.int64) for name in LINKSTAT_FIELDS}
        nd = len(d_conn)
        is_done = np.r_[np.ones(nd, bool), np.zeros(len(o_conn), bool)]
        start = np.r_[d_start, o_start]
        # rows of one record together, the latest-started last (its path is the record's)
        order = np.lexsort((start, conn, win))
        w_s, c_s = win[order], conn[order]
        head = np.ones(len(order), bool)
        head[1:] = (w_s[1:] != w_s[:-1]) | (c_s[1:] != c_s[:-1])
        starts = np.flatnonzero(head)
        group = np.cumsum(head) - 1
        ng = len(starts)
        last = np.r_[starts[1:], len(order)] - 1
        done_s = is_done[order]
        src = order  # index into the concatenated rows

        def total(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
            out = np.zeros(ng, np.int64)
            np.add.at(out, group[mask], values[mask])
            return out

        zeros = np.zeros(len(o_conn), np.int64)
        nbytes = np.r_[d_bytes, zeros][src]
        dur = np.r_[d_dur, zeros][src]
        retx = np.r_[d_retx, np.full(len(o_conn), NONE, np.int64)][src]
        transfers = total(np.ones(len(order), np.int64), done_s)
        max_ns = np.zeros(ng, np.int64)
        np.maximum.at(max_ns, group[done_s], dur[done_s])
        counted = done_s & (retx >= 0)
        retrans = np.where(total(np.ones(len(order), np.int64), counted) > 0,
                           total(retx, counted), NONE)
        since = np.full(ng, NEVER, np.int64)
        np.minimum.at(since, group[~done_s], start[src][~done_s])
        ends = self.windows.end(w_s[starts], stop_ns)
        cols = [self.conns.column(j)[c_s[starts]] for j in range(3)]
        return {"src": cols[0], "dst": cols[1], "pg": cols[2], "t_ns": ends,
                "window_ns": ends - w_s[starts] * self.windows.window_ns,
                "transfers": transfers, "bytes": total(nbytes, done_s),
                "busy_ns": total(dur, done_s), "max_ns": max_ns,
                "open": total(np.ones(len(order), np.int64), ~done_s),
                "open_since_ns": np.where(since == NEVER, NONE, since),
                "retrans": retrans, "path": np.r_[d_path, o_path][src][last]}
