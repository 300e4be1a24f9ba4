"""The bounded in-memory buffer between the hooks (many writers) and the shipper (one reader).

The hooks append plain tuples (see ``ROW_FIELDS``) to one list that is never replaced, and the
shipper takes rows off the front with ``rows[:n]`` then ``del rows[:n]``: each is one atomic list
operation under the GIL, and appends only ever land at the end, so nothing is lost between the
two steps and the hot path needs no lock. Columns for an ``OpBatch`` are built with numpy from a
whole batch of tuples at once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from proto import c4_pb2
from proto.codec import Columns

# Field order of a row tuple. ``error`` is None for rows whose status is ok.
ROW_FIELDS = ("pg", "seq", "op", "nbytes", "dtype", "t_enter_ns", "t_start_ns", "t_end_ns",
              "status", "peer", "error")
PG, SEQ, OP, NBYTES, DTYPE, T_ENTER, T_START, T_END, STATUS, PEER, ERROR = range(len(ROW_FIELDS))

_COLUMN_DTYPES = (
    ("pg", "<u4"), ("seq", "<i8"), ("op", "<u4"), ("nbytes", "<i8"), ("dtype", "<u4"),
    ("t_enter_ns", "<i8"), ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("status", "u1"),
    ("peer", "<i4"),
)


class StringTable:
    """Strings (group names, op names, dtypes) numbered once per process, never renumbered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index: dict[str, int] = {}
        self.strings: list[str] = []

    def intern(self, text: str) -> int:
        idx = self._index.get(text)
        if idx is not None:
            return idx
        with self._lock:
            idx = self._index.get(text)
            if idx is None:
                idx = len(self.strings)
                self.strings.append(text)
                self._index[text] = idx
            return idx

    def snapshot(self) -> list[str]:
        return list(self.strings)


class RecordBuffer:
    """Completed rows, calls still pending, and the groups announced so far."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rows: list[tuple] = []
        # token -> row of a call that has entered but not completed (t_end_ns = -1)
        self.pending: dict[int, tuple] = {}
        self.strings = StringTable()
        self.groups: list[c4_pb2.GroupInfo] = []
        self.recorded = 0        # rows offered by the hooks (approximate under threads)
        self.dropped_full = 0    # rows the hooks dropped because the buffer was full
        self.wake: threading.Event | None = None

    def append(self, row: tuple) -> None:
        """Cold-path append (async completions); the hooks inline the same logic."""
        self.recorded += 1
        rows = self.rows
        if len(rows) < self.capacity:
            rows.append(row)
            if len(rows) == self.capacity // 2 and self.wake is not None:
                self.wake.set()
        else:
            self.dropped_full += 1

    def take(self, limit: int) -> list[tuple]:
        """Remove and return up to ``limit`` rows from the front."""
        rows = self.rows
        n = min(len(rows), limit)
        if n == 0:
            return []
        out = rows[:n]
        del rows[:n]
        return out

    def clear(self) -> None:
        del self.rows[:]
        self.pending.clear()

    def open_rows(self, older_than_ns: int, already: set[int]) -> tuple[list[tuple], list[int]]:
        """Pending calls that entered before ``older_than_ns`` and were not reported yet."""
        snap = self.pending.copy()  # one atomic C-level copy; hooks keep mutating the original
        already.intersection_update(snap.keys())
        tokens = [tok for tok, row in snap.items()
                  if row[T_ENTER] < older_than_ns and tok not in already]
        return [snap[tok] for tok in tokens], tokens


def build_columns(rows: Sequence[tuple], rank: int, strings: list[str]) -> Columns:
    """Turn row tuples into the numpy columns that ``proto.codec.encode_ops`` expects."""
    n = len(rows)
    fields = list(zip(*rows, strict=True)) if n else [() for _ in ROW_FIELDS]
    cols: dict[str, np.ndarray] = {"rank": np.full(n, rank, dtype="<i4")}
    for i, (name, dtype) in enumerate(_COLUMN_DTYPES):
        cols[name] = np.array(fields[i], dtype=dtype) if n else np.empty(0, dtype=dtype)
    errors = fields[ERROR]
    error_text = {int(i): (errors[i] or "") for i in np.flatnonzero(cols["status"])}
    return Columns(cols, strings, error_text)
