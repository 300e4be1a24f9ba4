"""Dense ids for the keys a reducer aggregates by, assigned once and kept for the stream's life.

Rows arrive by the hundred thousand, keys (a rank's communicators, a job's connections) number a
few thousand: so a batch is sorted once, and only its distinct tuples go through a dict.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def group_starts(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort rows by ``cols`` (the first column most significant) and mark where each run of
    equal tuples begins: returns (order, first), ``first[i]`` True at a sorted row that differs
    from the one before it."""
    n = len(cols[0])
    if not n:
        return np.empty(0, np.int64), np.zeros(0, dtype=bool)
    code = _packed(cols)
    if code is not None:        # one integer per row: one sort instead of a lexsort
        order = np.argsort(code, kind="stable")
        s = code[order]
        first = np.empty(n, dtype=bool)
        first[0] = True
        first[1:] = s[1:] != s[:-1]
        return order, first
    order = np.lexsort(cols[::-1])
    first = np.zeros(n, dtype=bool)
    first[0] = True
    for c in cols:
        s = c[order]
        first[1:] |= s[1:] != s[:-1]
    return order, first


def _packed(cols: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """The rows as one int64 each, ordered as the tuples are, when their ranges fit."""
    lows, spans = [], []
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        lows.append(lo)
        spans.append(hi - lo + 1)
    total = 1
    for span in spans:
        total *= span
    if total >= 1 << 62:
        return None
    code = np.zeros(len(cols[0]), np.int64)
    for c, lo, span in zip(cols, lows, spans):
        code = code * span + (np.asarray(c, dtype=np.int64) - lo)
    return code


class RowIds:
    """Ids 0, 1, 2, ... of distinct integer tuples, in the order they were first seen, with the
    tuples themselves as columns (``column(j)[id]``)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._ids: dict[tuple[int, ...], int] = {}
        self._cols = [np.empty(0, np.int64) for _ in range(width)]

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, *cols: np.ndarray) -> np.ndarray:
        """The id of each row ``(cols[0][i], cols[1][i], ...)``, new tuples getting new ids."""
        if len(cols) != self.width:
            raise ValueError(f"RowIds takes {self.width} columns, got {len(cols)}")
        arrs = [np.asarray(c, dtype=np.int64) for c in cols]
        order, first = group_starts(*arrs)
        if not len(order):
            return np.empty(0, np.int64)
        starts = order[first]
        uniq = list(zip(*(a[starts].tolist() for a in arrs)))
        ids, known, fresh = self._ids, [], []
        for t in uniq:
            i = ids.get(t)
            if i is None:
                i = ids[t] = len(ids)
                fresh.append(t)
            known.append(i)
        if fresh:
            cols_new = np.asarray(fresh, dtype=np.int64).reshape(len(fresh), self.width)
            self._cols = [np.concatenate([c, cols_new[:, j]]) for j, c in enumerate(self._cols)]
        out = np.empty(len(order), np.int64)
        out[order] = np.asarray(known, dtype=np.int64)[np.cumsum(first) - 1]
        return out

    def column(self, j: int) -> np.ndarray:
        """Field ``j`` of every tuple, indexed by id."""
        return self._cols[j]


class Strings:
    """The reducer's own string table: batches index their own tables, the output this one."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def id(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            i = self._index[name] = len(self.names)
            self.names.append(name)
        return i

    def remap(self, batch_strings: Sequence[str], col: np.ndarray) -> np.ndarray:
        """``col`` (indices into ``batch_strings``, -1: none) as ids of this table (-1 kept)."""
        table = np.array([self.id(s) for s in batch_strings] + [-1], dtype=np.int64)
        col = np.asarray(col, dtype=np.int64)
        if len(col) and (int(col.max(initial=-1)) >= len(batch_strings)
                         or int(col.min(initial=0)) < -1):
            raise ValueError(f"a string column points outside its table of "
                             f"{len(batch_strings)} strings")
        return table[col]
