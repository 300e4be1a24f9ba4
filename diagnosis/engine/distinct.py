"""The distinct values of an integer column, as ``np.unique`` gives them, without its hash table.

numpy 2's ``np.unique`` finds distinct integers with a hash table and then sorts them, which
measured three to ten times slower than one sort, and slower still than a table of flags when
the values span a small range (the ids of communicators, slots and names that the engine
interns). The detectors take the distinct values of every batch and of every pass, so at
thousands of GPUs this was a second of ``c4 analyze``'s engine.
"""

from __future__ import annotations

import numpy as np

#: a table of flags is used while the values span at most this many times their count
#: (plus a floor, for small columns): beyond that, clearing and scanning it costs more than
#: sorting the values
_DENSE_PER_VALUE = 4
_DENSE_FLOOR = 1 << 16
#: and never for a span past this (bytes of flags)
_DENSE_MAX = 1 << 26


def _span(values: np.ndarray) -> tuple[int, int] | None:
    """(lowest, span) of ``values`` when a table of flags suits them, else None."""
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span > min(_DENSE_MAX, _DENSE_PER_VALUE * len(values) + _DENSE_FLOOR) \
            or hi > np.iinfo(np.int64).max:
        return None
    return lo, span


def _offsets(values: np.ndarray, lo: int) -> np.ndarray:
    """Each value's place in the table of flags (in int64: a narrow dtype would wrap)."""
    at = values.astype(np.int64, copy=False)
    return at - lo if lo else at


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D integer array: its distinct values, sorted, of its
    dtype."""
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise TypeError(f"distinct takes a 1-D array of integers, got {values.dtype} of "
                        f"{values.ndim} dimension(s): use np.unique")
    if not len(values):
        return values.copy()
    dense = _span(values)
    if dense is None:
        out = np.sort(values)
        keep = np.empty(len(out), dtype=bool)
        keep[0] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        return out[keep]
    lo, span = dense
    flags = np.zeros(span, dtype=bool)
    flags[_offsets(values, lo)] = True
    return (np.flatnonzero(flags) + lo).astype(values.dtype, copy=False)


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a 1-D integer array: its distinct values,
    sorted, and the index of each value among them."""
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise TypeError(f"distinct_inverse takes a 1-D array of integers, got {values.dtype} "
                        f"of {values.ndim} dimension(s): use np.unique")
    dense = _span(values) if len(values) else None
    if dense is None:
        return np.unique(values, return_inverse=True)    # (an argsort: no hash table)
    lo, span = dense
    at = _offsets(values, lo)
    flags = np.zeros(span, dtype=bool)
    flags[at] = True
    index = np.cumsum(flags, dtype=np.int64) - 1
    return (np.flatnonzero(flags) + lo).astype(values.dtype, copy=False), index[at]
