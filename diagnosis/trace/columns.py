"""Columns of a trace block on the reader's fast path, one numpy array per field.

Each builder takes a field's values as parsed (one per record of the batch) and either returns
its column or raises :class:`Bad`: the reader then checks the batch record by record
(:mod:`diagnosis.trace.fields`) to name the line and field. The checks here are loops in C
(numpy, ``dict.fromkeys``, ``list.count``), so a batch costs no Python loop per field beyond
collecting its values.
"""

from __future__ import annotations

import itertools
from operator import itemgetter
from typing import Any

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max


class Bad(Exception):
    """The fast path failed: re-read the batch record by record."""


def required(recs: list[dict[str, Any]], field: str) -> list[Any]:
    """A required field of every record (KeyError where one lacks it), collected in C."""
    return list(map(itemgetter(field), recs))


def int_column(values: list[Any]) -> np.ndarray:
    """Integers, every row present."""
    arr = np.array(values)
    if arr.dtype.kind not in "iu":
        raise Bad
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
        # numpy picks uint64 only for values past int64, which astype would wrap to negatives
        raise Bad
    return arr.astype(np.int64, copy=False)


def opt_int_column(values: list[Any]) -> np.ndarray:
    """Integers, -1 where a row has none (missing or null)."""
    try:
        return int_column(values)
    except (Bad, ValueError, TypeError):
        pass
    return int_column([-1 if v is None else v for v in values])


def nonneg_column(values: list[Any]) -> np.ndarray:
    """Non-negative integers, every row present."""
    arr = int_column(values)
    if len(arr) and int(arr.min()) < 0:
        raise Bad
    return arr


def opt_nonneg_column(values: list[Any], absent: int) -> np.ndarray:
    """Non-negative integers, ``absent`` where a row has none (missing or null). A row that
    writes -1 is an error, not taken for a missing value where ``absent`` is -1."""
    missing = values.count(None)
    if missing == len(values):
        return np.full(len(values), absent, dtype=np.int64)
    if not missing:
        return nonneg_column(values)
    arr = nonneg_column([0 if v is None else v for v in values])
    if absent:
        arr[np.fromiter((v is None for v in values), dtype=bool, count=len(values))] = absent
    return arr


def intern(values: list[Any], table: dict[str, int]) -> np.ndarray:
    """Indexes into ``table`` (extended as needed) of strings, every row present."""
    uniq = dict.fromkeys(values)          # hashing in C; types checked once per distinct value
    if not all(isinstance(v, str) for v in uniq):
        raise Bad
    for v in uniq:
        uniq[v] = table.setdefault(v, len(table))
    return np.array([uniq[v] for v in values], dtype=np.int64)


def opt_intern(values: list[Any], table: dict[str, int]) -> np.ndarray:
    """Like :func:`intern`, -1 where a row has none (missing or null)."""
    if values.count(None) == len(values):
        return np.full(len(values), -1, dtype=np.int64)
    uniq = dict.fromkeys(values)
    if not all(v is None or isinstance(v, str) for v in uniq):
        raise Bad
    for v in uniq:
        uniq[v] = -1 if v is None else table.setdefault(v, len(table))
    return np.array([uniq[v] for v in values], dtype=np.int64)


def path_column(values: list[Any]) -> list[tuple[str, ...] | None] | None:
    """Per row a path of topology node ids, or None; None when no row has one."""
    if values.count(None) == len(values):
        return None
    if not set(map(type, values)) <= {list, type(None)}:
        raise Bad
    paths = [tuple(p) if p else None for p in values]
    # every element of every distinct path a string: one pass in C over the elements
    distinct = [p for p in dict.fromkeys(paths) if p is not None]
    if not set(map(type, itertools.chain.from_iterable(distinct))) <= {str}:
        raise Bad
    return paths
