"""Columns of a trace block on the reader's fast path, one numpy array per field.

Each builder takes a field's values as parsed (one per record of the batch) and either returns
its column or raises :class:`Bad`: the reader then checks the batch record by record
(:mod:`diagnosis.trace.fields`) to name the line and field. The checks here are loops in C
(numpy, ``dict.fromkeys``, ``list.count``), so a batch costs no Python loop per field beyond
collecting its values.
"""

from __future__ import annotations

import itertools
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max


class Bad(Exception):
    """The fast path failed: re-read the batch record by record."""


def required(recs: list[dict[str, Any]], field: str) -> list[Any]:
    """A required field of every record (KeyError where one lacks it), collected in C."""
    return list(map(itemgetter(field), recs))


class Rows:
    """A batch's records, as dicts parsed from JSON: each field's values as a column."""

    __slots__ = ("recs",)
    #: the records are typed (diagnosis.trace.typed): values are of the field's type already
    typed = False

    def __init__(self, recs: list[Any]) -> None:
        self.recs = recs

    def __len__(self) -> int:
        return len(self.recs)

    def required(self, field: str) -> list[Any]:
        """A required field of every record (KeyError where one lacks it)."""
        return list(map(dict.__getitem__, self.recs, repeat(field)))

    def optional(self, field: str) -> list[Any]:
        """A field of every record, None where one lacks it."""
        return list(map(dict.get, self.recs, repeat(field)))

    def ints(self, field: str) -> np.ndarray:
        return int_column(self.required(field), self.typed)

    def nonneg(self, field: str) -> np.ndarray:
        return nonneg_column(self.required(field), self.typed)

    def opt_ints(self, field: str) -> np.ndarray:
        return opt_int_column(self.optional(field), self.typed)

    def opt_nonneg(self, field: str, absent: int) -> np.ndarray:
        return opt_nonneg_column(self.optional(field), absent, self.typed)

    def paths(self, field: str) -> list[tuple[str, ...] | None] | None:
        return path_column(self.optional(field), self.typed)


class StructRows(Rows):
    """A batch's records decoded into typed structs (diagnosis.trace.typed): every field an
    attribute, None where the line has none, each value of the field's type; so integers go
    to numpy straight from the records, and a column with None falls back to the lists."""

    __slots__ = ()
    typed = True

    def required(self, field: str) -> list[Any]:
        return list(map(attrgetter(field), self.recs))

    optional = required

    def ints(self, field: str) -> np.ndarray:
        # past int64: OverflowError; None in an optional field: TypeError
        return np.fromiter(map(attrgetter(field), self.recs), np.int64, len(self.recs))

    def nonneg(self, field: str) -> np.ndarray:
        arr = self.ints(field)
        if len(arr) and int(arr.min()) < 0:
            raise Bad
        return arr

    def opt_ints(self, field: str) -> np.ndarray:
        try:
            return self.ints(field)
        except TypeError:
            return opt_int_column(self.optional(field), True)

    def opt_nonneg(self, field: str, absent: int) -> np.ndarray:
        try:
            return self.nonneg(field)
        except TypeError:
            return opt_nonneg_column(self.optional(field), absent, True)


def int_column(values: list[Any], typed: bool = False) -> np.ndarray:
    """Integers, every row present. ``typed``: the values are Python ints already (decoded
    into typed records), so no type needs finding; one past int64 raises OverflowError."""
    if typed:
        return np.fromiter(values, np.int64, len(values))
    arr = np.array(values)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or bool in set(map(type, values)):
        # (a list in one row of a batch of one, [0], makes a column of another shape)
        # numpy takes true and false among integers for 1 and 0: the format does not
        raise Bad
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
        # numpy picks uint64 only for values past int64, which astype would wrap to negatives
        raise Bad
    return arr.astype(np.int64, copy=False)


def opt_int_column(values: list[Any], typed: bool = False) -> np.ndarray:
    """Integers, -1 where a row has none (missing or null)."""
    missing = values.count(None)
    if missing == len(values):
        return np.full(len(values), -1, dtype=np.int64)
    if not missing:
        return int_column(values, typed)
    return int_column([-1 if v is None else v for v in values], typed)


def nonneg_column(values: list[Any], typed: bool = False) -> np.ndarray:
    """Non-negative integers, every row present."""
    arr = int_column(values, typed)
    if len(arr) and int(arr.min()) < 0:
        raise Bad
    return arr


def opt_nonneg_column(values: list[Any], absent: int, typed: bool = False) -> np.ndarray:
    """Non-negative integers, ``absent`` where a row has none (missing or null). A row that
    writes -1 is an error, not taken for a missing value where ``absent`` is -1."""
    missing = values.count(None)
    if missing == len(values):
        return np.full(len(values), absent, dtype=np.int64)
    if not missing:
        return nonneg_column(values, typed)
    arr = int_column([-1 if v is None else v for v in values], typed)
    holes = arr == -1
    # every -1 must be a row without the field: a negative written is an error
    if int(arr.min()) < -1 or int(np.count_nonzero(holes)) != missing:
        raise Bad
    if absent != -1:
        arr[holes] = absent
    return arr


def intern(values: list[Any], table: dict[str, int]) -> np.ndarray:
    """Indexes into ``table`` (extended as needed) of strings, every row present."""
    uniq = dict.fromkeys(values)          # hashing in C; types checked once per distinct value
    if not all(isinstance(v, str) for v in uniq):
        raise Bad
    for v in uniq:
        uniq[v] = table.setdefault(v, len(table))
    return np.fromiter(map(uniq.__getitem__, values), np.int64, len(values))


def opt_intern(values: list[Any], table: dict[str, int]) -> np.ndarray:
    """Like :func:`intern`, -1 where a row has none (missing or null)."""
    if values.count(None) == len(values):
        return np.full(len(values), -1, dtype=np.int64)
    uniq = dict.fromkeys(values)
    if not all(v is None or isinstance(v, str) for v in uniq):
        raise Bad
    for v in uniq:
        uniq[v] = -1 if v is None else table.setdefault(v, len(table))
    return np.fromiter(map(uniq.__getitem__, values), np.int64, len(values))


def path_column(values: list[Any], typed: bool = False) -> list[tuple[str, ...] | None] | None:
    """Per row a path of topology node ids, or None; None when no row has one. ``typed``: the
    values are tuples of strings already (or None)."""
    if values.count(None) == len(values):
        return None
    if typed:
        # an empty path is no path
        return [p or None for p in values] if () in values else values
    if not set(map(type, values)) <= {list, type(None)}:
        raise Bad
    paths = [tuple(p) if p else None for p in values]
    # every element of every distinct path a string: one pass in C over the elements
    distinct = [p for p in dict.fromkeys(paths) if p is not None]
    if not set(map(type, itertools.chain.from_iterable(distinct))) <= {str}:
        raise Bad
    return paths
