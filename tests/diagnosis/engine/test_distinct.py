"""``distinct`` and ``distinct_inverse`` give exactly what ``np.unique`` gives, on both of their
paths (a table of flags for values in a small range, a sort for the rest)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.engine.distinct import distinct, distinct_inverse

_CASES = [
    # (dtype, low, high, count): dense ranges, sparse ones, negatives, narrow dtypes at
    # their limits, one value, ids past the flag table's reach
    (np.int64, 0, 50, 10_000),
    (np.int64, 0, 3, 7),
    (np.int64, -1, 2_000, 5_000),
    (np.int64, -(1 << 40), 1 << 40, 3_000),
    (np.int64, 1 << 50, (1 << 50) + 100, 1_000),
    (np.int8, -128, 128, 2_000),
    (np.uint8, 0, 256, 500),
    (np.int32, -5, 5, 1),
    (np.uint64, 0, 1 << 20, 4_000),
]


@pytest.mark.parametrize(("dtype", "low", "high", "count"), _CASES)
def test_the_same_as_numpy_unique(dtype: type, low: int, high: int, count: int) -> None:
    rng = np.random.default_rng(count)
    values = rng.integers(low, high, count, dtype=dtype)
    want, want_inv = np.unique(values, return_inverse=True)
    got = distinct(values)
    got_u, got_inv = distinct_inverse(values)
    for out in (got, got_u):
        assert out.dtype == values.dtype
        np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(got_inv, want_inv)
    np.testing.assert_array_equal(got_u[got_inv], values)


def test_uint64_past_int64_takes_the_sort() -> None:
    top = np.iinfo(np.uint64).max
    values = np.array([top, top - 3, 7, top, 7], dtype=np.uint64)
    np.testing.assert_array_equal(distinct(values), np.unique(values))
    u, inv = distinct_inverse(values)
    np.testing.assert_array_equal(u[inv], values)


def test_empty() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert distinct(empty).dtype == np.int64 and len(distinct(empty)) == 0
    u, inv = distinct_inverse(empty)
    assert len(u) == 0 and len(inv) == 0


def test_other_arrays_are_refused() -> None:
    with pytest.raises(TypeError, match=r"np\.unique"):
        distinct(np.array([1.0, np.nan]))
    with pytest.raises(TypeError, match=r"np\.unique"):
        distinct_inverse(np.zeros((2, 2), dtype=np.int64))
