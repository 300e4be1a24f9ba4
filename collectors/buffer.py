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

from c4.proto import c4_pb2
from c4.proto.codec import Columns

# Field order of a row tuple: ten integers, so that a batch converts to numpy in one call. The
# text of a failed call waits in ``RecordBuffer.errors`` under the row's ``error_key``.
ROW_FIELDS = ("pg", "seq", "op", "nbytes", "dtype", "t_enter_ns", "t_start_ns", "t_end_ns",
              "status", "peer")
PG, SEQ, OP, NBYTES, DTYPE, T_ENTER, T_START, T_END, STATUS, PEER = range(len(ROW_FIELDS))
# Error texts beyond this many unclaimed ones (their rows were dropped) are forgotten.
MAX_ERROR_TEXTS = 4096


def error_key(row: Sequence[int]) -> tuple[int, int, int, int, int]:
    return (int(row[PG]), int(row[SEQ]), int(row[OP]), int(row[PEER]), int(row[T_ENTER]))

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
        # tokens of pending calls that the GPU has not reached yet: the CPU queued them on a
        # stream that is still busy with earlier work, so the rank is not waiting in them
        self.queued: set[int] = set()
        self.strings = StringTable()
        self.groups: list[c4_pb2.GroupInfo] = []
        self.errors: dict[tuple, str] = {}
        self.taken = 0           # rows the shipper has taken off the front
        self.dropped_full = 0    # rows the hooks dropped because the buffer was full
        # set when the buffer is half full, so that the shipper does not wait for its tick
        self.wake = threading.Event()

    @property
    def recorded(self) -> int:
        """Completed calls recorded so far (counted without a counter on the hot path)."""
        return self.taken + len(self.rows) + self.dropped_full

    def append(self, row: tuple, error: str | None = None) -> None:
        """Cold-path append (async completions, failures); the hooks inline the same logic."""
        rows = self.rows
        if len(rows) < self.capacity:
            if error is not None:
                if len(self.errors) >= MAX_ERROR_TEXTS:
                    self.errors.clear()
                self.errors[error_key(row)] = error
            rows.append(row)
            if len(rows) == self.capacity // 2:
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
        self.taken += n
        return out

    def give_back(self, rows: list[tuple]) -> int:
        """Put rows that could not be sent back at the front; returns how many did not fit."""
        room = self.capacity - len(self.rows)
        keep = rows[:max(room, 0)]
        self.rows[:0] = keep  # one atomic list operation; the hooks only append at the end
        self.taken -= len(keep)
        return len(rows) - len(keep)

    def clear(self) -> None:
        del self.rows[:]
        self.pending.clear()
        self.queued.clear()
        self.errors.clear()

    def open_rows(self, older_than_ns: int, already: set[int]) -> tuple[list[tuple], list[int]]:
        """Pending calls that entered before ``older_than_ns`` and were not reported yet (calls
        still queued behind earlier GPU work have not entered)."""
        snap = self.pending.copy()  # one atomic C-level copy; hooks keep mutating the original
        queued = self.queued.copy()
        already.intersection_update(snap.keys())
        tokens = [tok for tok, row in snap.items()
                  if row[T_ENTER] < older_than_ns and tok not in already and tok not in queued]
        return [snap[tok] for tok in tokens], tokens


def build_columns(rows: Sequence[tuple], rank: int, strings: list[str],
                  errors: dict[tuple, str] | None = None) -> Columns:
    """Turn row tuples into the numpy columns that ``c4.proto.codec.encode_ops`` expects.

    The texts of failed rows are looked up in ``errors`` (left there: the shipper removes them
    once the batch is sent, so that a batch that must be resent keeps them).
    """
    n = len(rows)
    table = np.array(rows, dtype=np.int64).reshape(n, len(ROW_FIELDS))
    cols: dict[str, np.ndarray] = {"rank": np.full(n, rank, dtype="<i4")}
    for i, (name, dtype) in enumerate(_COLUMN_DTYPES):
        cols[name] = table[:, i].astype(dtype)
    error_text: dict[int, str] = {}
    for row in np.flatnonzero(cols["status"]):
        text = errors.get(error_key(table[row]), "") if errors is not None else ""
        error_text[int(row)] = text
    return Columns(cols, strings, error_text)
