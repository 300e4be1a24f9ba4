"""One job attempt at the edge: its sampling schedule, its reducer (progress and linkstat
windows), its socket transfers, and the rows it ships (see :mod:`collectors.sidecar.edge`)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from c4.proto.codec import PROGRESS_COLUMNS, Columns, concat
from c4.reduce import EdgeReducer
from c4.reduce.links import SocketTransfers
from c4.reduce.sampling import take
from collectors.sidecar.edge_config import EdgeConfig
from collectors.sidecar.ring import DetailRing
from collectors.sidecar.schedule import Schedule

STATUS_OK = 0
# unsampled calls shipped open whose completion is still to ship, per job (oldest forgotten)
MAX_OPEN_REMEMBERED = 65536


class EdgeJob:
    """One job attempt on this node: its schedule, reducer and socket transfers."""

    def __init__(self, job: str, attempt: int, config: EdgeConfig, ring: DetailRing) -> None:
        self.job, self.attempt = job, attempt
        self.config = config
        self.ring = ring
        self.schedule = Schedule()
        self.window_ns = config.window_ns
        self.reducer: EdgeReducer | None = None
        self._cut_ns = 0              # records of windows ending at or before this are sent
        self._pending_window: tuple[int, int] | None = None   # (window_ns, from_ns)
        self.sockets = SocketTransfers()
        self._recent: deque[tuple[int, Columns]] = deque()    # transfer rows, for a re-seed
        self.max_seq: dict[str, int] = {}
        self._open: OrderedDict[tuple[int, str, str, int, int], None] = OrderedDict()
        self.ports_sent = False
        self.heard = time.monotonic()   # last rows or samples from its ranks
        self._inbox: list[tuple[Columns, Any]] = []

    @property
    def reduced(self) -> bool:
        return self.schedule.max_sample > 1

    # -- op rows ------------------------------------------------------------------------
    def take_ops(self, cols: Columns, tag: Any) -> Columns | None:
        """The rows of a collector batch to ship now (full telemetry), or None: reduced, they
        wait with their ``tag`` (the caller's: its logged frame) for :meth:`drain`, one pass
        per tick for every rank's batches, not one per batch (the reducer's cost is mostly per
        call)."""
        self._note_seqs(cols)
        if not self.reduced:
            return cols
        self._inbox.append((cols, tag))
        return None

    def drain(self) -> list[tuple[Columns, Any]]:
        """Per batch received since the last drain, the rows of it to ship and its tag."""
        if not self._inbox:
            return []
        parts, self._inbox = self._inbox, []
        if not self.reduced:
            return parts
        cols = concat([c for c, _ in parts]) if len(parts) > 1 else parts[0][0]
        assert self.reducer is not None
        self.reducer.observe_calls(cols)
        status = np.asarray(cols["status"])
        open_ = np.asarray(cols["t_end_ns"]) < 0
        sampled = self.schedule.kept(cols)
        keep = sampled | (status != STATUS_OK) | open_
        self._remember_open(cols, open_ & ~sampled)
        if self._open:
            keep |= self._completing(cols, ~keep)
        out, at = [], 0
        for part, tag in parts:
            mask = keep[at:at + len(part)]
            at += len(part)
            out.append((part if mask.all() else take(part, mask), tag))
        return out

    def _note_seqs(self, cols: Columns) -> None:
        pg = np.asarray(cols["pg"], dtype=np.int64)
        seq = np.asarray(cols["seq"], dtype=np.int64)
        if not len(pg):
            return
        top = np.full(len(cols.strings), -1, np.int64)
        np.maximum.at(top, pg, seq)
        for i in np.flatnonzero(top >= 0).tolist():
            name = cols.strings[i]
            if top[i] > self.max_seq.get(name, -1):
                self.max_seq[name] = int(top[i])

    def _keys(self, cols: Columns, rows: np.ndarray) -> list[tuple[int, str, str, int, int]]:
        names = cols.strings
        return list(zip(cols["rank"][rows].tolist(),
                        [names[i] for i in cols["pg"][rows].tolist()],
                        [names[i] for i in cols["op"][rows].tolist()],
                        cols["peer"][rows].tolist(), cols["seq"][rows].tolist(), strict=True))

    def _remember_open(self, cols: Columns, mask: np.ndarray) -> None:
        rows = np.flatnonzero(mask)
        for k in self._keys(cols, rows):
            self._open[k] = None
        while len(self._open) > MAX_OPEN_REMEMBERED:
            self._open.popitem(last=False)

    def _completing(self, cols: Columns, candidates: np.ndarray) -> np.ndarray:
        """Rows that complete a call shipped open although unsampled: they go too."""
        out = np.zeros(len(cols), dtype=bool)
        done = candidates & (np.asarray(cols["t_end_ns"]) >= 0)
        seqs = np.fromiter((k[4] for k in self._open), dtype=np.int64, count=len(self._open))
        rows = np.flatnonzero(done & np.isin(cols["seq"], seqs))
        for row, k in zip(rows.tolist(), self._keys(cols, rows), strict=True):
            if k in self._open:
                del self._open[k]
                out[row] = True
        return out

    # -- schedule -------------------------------------------------------------------------
    def set_schedule(self, new: Schedule, now_ns: int) -> tuple[Columns | None, int]:
        """Take a newer schedule. Returns the rows to ship that mend steps which came after
        rows they cover (and how many such steps there were)."""
        old, self.schedule = self.schedule, new
        mend: list[Columns] = []
        late = 0
        for pg, steps in new.steps.items():
            top = self.max_seq.get(pg, -1)
            for from_seq, _k in steps:
                if from_seq > top or (from_seq, _k) in old.steps.get(pg, ()):
                    continue
                late += 1
                held = self.ring.rows(self.job, self.attempt, from_ns=0, pg=pg,
                                      min_seq=from_seq)
                if held is None:
                    continue
                extra = new.kept(held) & ~old.kept(held)
                if extra.any():
                    mend.append(take(held, extra))
        target = new.window_ns or self.config.window_ns
        if target != self.window_ns and (self._pending_window is None or
                                         self._pending_window[0] != target):
            self._pending_window = (target, new.window_from_ns)
        if self.reduced and self.reducer is None:
            self._start_reducer(self.window_ns, now_ns - int(self.config.lag_s * 1e9), 0)
        elif not self.reduced and self.reducer is not None:
            self.reducer = None   # back to full telemetry: every row and raw samples again
        return (concat(mend) if mend else None), late

    def _start_reducer(self, window_ns: int, seed_from_ns: int, cut_ns: int) -> None:
        """A fresh reducer, fed the ring's calls since ``seed_from_ns`` and the recent socket
        transfers, whose records for windows ending at or before ``cut_ns`` are dropped."""
        self.window_ns = window_ns
        self.reducer = EdgeReducer(1, window_ns)
        self._cut_ns = cut_ns
        seed = self.ring.rows(self.job, self.attempt, from_ns=seed_from_ns)
        if seed is not None:
            self.reducer.observe_calls(seed)
        for _, rows in self._recent:
            self.reducer.add_transfers(rows)
        stuck = self.sockets.open_rows()
        if len(stuck):
            self.reducer.add_transfers(stuck)

    # -- socket samples -------------------------------------------------------------------
    def take_conns(self, cols: Columns, now_ns: int) -> Columns | None:
        """Raw samples to ship (full telemetry), or None: they went into linkstat windows."""
        rows = self.sockets.add(cols)
        if len(rows):
            self._recent.append((now_ns, rows))
        keep_ns = now_ns - int((2 * self.config.lag_s + 2 * self.window_ns / 1e9) * 1e9)
        while self._recent and self._recent[0][0] < keep_ns:
            self._recent.popleft()
        if not self.reduced:
            return cols
        assert self.reducer is not None
        if len(rows):
            self.reducer.add_transfers(rows)
        return None

    # -- windows --------------------------------------------------------------------------
    def windows(self, now_ns: int) -> tuple[Columns | None, Columns | None]:
        """The progress and linkstat records of the windows the watermark has closed."""
        if not self.reduced or self.reducer is None:
            return None, None
        wm = now_ns - int(self.config.lag_s * 1e9)
        progress, links = [], []
        pending = self._pending_window
        if pending is not None and (pending[1] <= wm):
            new_ns, at = pending
            at = at or wm
            last = self.reducer.flush(at)
            progress.append(self._progress(last.progress))
            links.append(self._linkstat(last.linkstat))
            self._pending_window = None
            self._start_reducer(new_ns, at - int(self.config.lag_s * 1e9) - self.window_ns, at)
        out = self.reducer.advance(wm)
        progress.append(self._progress(out.progress))
        links.append(self._linkstat(out.linkstat))
        return _join(progress), _join(links)

    def _progress(self, p: Columns) -> Columns | None:
        keep = p["t_ns"] > self._cut_ns
        if not keep.any():
            return None
        c = {k: np.asarray(p[k][keep]) for k in PROGRESS_COLUMNS}
        return Columns(c, list(p.strings))

    def _linkstat(self, ls: Columns) -> Columns | None:
        keep = ls["t_ns"] > self._cut_ns
        if not keep.any():
            return None
        return self.sockets.linkstat(take(ls, keep))


def _join(parts: list[Columns | None]) -> Columns | None:
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else concat(parts)
