"""The detail ring: the full op records of the node's ranks over the last minutes, in memory,
bounded in bytes, so that the daemon can pull every call around a fault report's onset when the
job ships only sampled calls (detail on demand, like a cluster-wide flight recorder).

Batches go in as they arrive from the collectors (before sampling) and leave oldest first once
the ring holds more than ``max_bytes``. A request for a time range is answered with what is
still held; the answer says whether the range was held whole, in part (the oldest part was
already gone) or not at all.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import Columns, concat

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (job, attempt)


@dataclass
class _Held:
    key: Key
    t_lo: int       # the earliest entry in the batch
    t_hi: int       # the latest entry or end
    cols: Columns
    size: int


@dataclass(frozen=True)
class Answer:
    """What the ring holds for a request: the rows, and how much of the range it covered."""

    status: int              # c4_pb2.DetailBatch.Status
    rows: Columns | None
    held_from_ns: int        # the oldest time still held for the job (0: nothing held)
    truncated: bool = False


def columns_size(cols: Columns) -> int:
    """Bytes a batch takes in the ring (its arrays and its string table)."""
    return sum(a.nbytes for a in cols.columns.values()) + sum(len(s) + 50 for s in cols.strings)


class DetailRing:
    """Thread-safe; ``add`` from the frame thread, ``answer`` from the control thread."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"the detail ring's size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._held: deque[_Held] = deque()
        self._lock = threading.Lock()
        self.bytes = 0
        # per job attempt: the latest time of any batch that left the ring
        self._lost_upto: dict[Key, int] = {}
        self.evicted = 0

    def add(self, job: str, attempt: int, cols: Columns) -> None:
        n = len(cols)
        if not n or not self.max_bytes:
            return
        enter = cols["t_enter_ns"]
        t_lo = int(enter.min())
        t_hi = int(max(enter.max(), cols["t_end_ns"].max()))
        size = columns_size(cols)
        with self._lock:
            self._held.append(_Held((job, attempt), t_lo, t_hi, cols, size))
            self.bytes += size
            while self.bytes > self.max_bytes and len(self._held) > 1:
                old = self._held.popleft()
                self.bytes -= old.size
                self.evicted += 1
                self._lost_upto[old.key] = max(self._lost_upto.get(old.key, 0), old.t_hi)

    def held_from(self, job: str, attempt: int) -> int:
        with self._lock:
            return min((h.t_lo for h in self._held if h.key == (job, attempt)), default=0)

    def rows(self, job: str, attempt: int, *, from_ns: int, to_ns: int | None = None,
             ranks: set[int] | None = None, pg: str | None = None,
             min_seq: int | None = None) -> Columns | None:
        """The held rows of a job attempt that overlap ``[from_ns, to_ns]`` (a call entered
        before the end and not ended before the start), of ``ranks`` and ``pg`` if given, with
        seq >= ``min_seq`` if given; None when there are none."""
        with self._lock:
            parts = [h.cols for h in self._held if h.key == (job, attempt)
                     and h.t_hi >= from_ns and (to_ns is None or h.t_lo <= to_ns)]
        picked = []
        for cols in parts:
            enter, end = cols["t_enter_ns"], cols["t_end_ns"]
            mask = ((end < 0) | (end >= from_ns))
            if to_ns is not None:
                mask &= enter <= to_ns
            if ranks:
                mask &= np.isin(cols["rank"], np.fromiter(ranks, dtype=np.int64))
            if pg is not None:
                ids = [i for i, s in enumerate(cols.strings) if s == pg]
                mask &= np.isin(cols["pg"], ids)
            if min_seq is not None:
                mask &= cols["seq"] >= min_seq
            if mask.any():
                picked.append(_take(cols, mask))
        return concat(picked) if picked else None

    def answer(self, req: c4_pb2.DetailRequest) -> Answer:
        key = (req.job, req.attempt)
        rows = self.rows(req.job, req.attempt, from_ns=req.from_ns, to_ns=req.to_ns,
                         ranks=set(req.ranks) or None)
        with self._lock:
            lost = self._lost_upto.get(key)
        held_from = self.held_from(req.job, req.attempt)
        if not self.max_bytes:
            return Answer(c4_pb2.DetailBatch.GONE, None, 0)
        lost_some = lost is not None and lost >= req.from_ns
        if rows is not None:
            rows = _latest_per_call(rows)
        truncated = False
        if rows is not None and req.max_records and len(rows) > req.max_records:
            order = np.argsort(rows["t_enter_ns"], kind="stable")[:req.max_records]
            mask = np.zeros(len(rows), dtype=bool)
            mask[order] = True
            rows, truncated = _take(rows, mask), True
        if rows is None and lost_some:
            return Answer(c4_pb2.DetailBatch.GONE, None, held_from)
        status = c4_pb2.DetailBatch.PARTIAL if lost_some else c4_pb2.DetailBatch.COMPLETE
        return Answer(status, rows, held_from, truncated)


def _take(cols: Columns, mask: np.ndarray) -> Columns:
    rows = np.flatnonzero(mask)
    new = {int(old): i for i, old in enumerate(rows.tolist())} if cols.error_text else {}
    return Columns({k: v[rows] for k, v in cols.columns.items()}, cols.strings,
                   {new[r]: t for r, t in cols.error_text.items() if r in new})


def _latest_per_call(cols: Columns) -> Columns:
    """One row per call: a completed row wins over the open row shipped before it."""
    names = np.asarray(cols.strings, dtype=object)
    key = list(zip(cols["rank"].tolist(), names[cols["pg"]].tolist(),
                   names[cols["op"]].tolist(), cols["peer"].tolist(), cols["seq"].tolist()))
    best: dict[tuple, int] = {}
    end = cols["t_end_ns"].tolist()
    for i, k in enumerate(key):
        j = best.get(k)
        if j is None or end[j] < 0 <= end[i] or (end[i] >= 0 and end[j] >= 0):
            best[k] = i
    mask = np.zeros(len(cols), dtype=bool)
    mask[list(best.values())] = True
    return cols if mask.all() else _take(cols, mask)
