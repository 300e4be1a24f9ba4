"""The one-sort medians give numpy's nanmedian, NaNs and empty rows included."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from diagnosis.engine.medians import nanmedian

_VALUES = st.one_of(st.just(np.nan), st.floats(-1e9, 1e9))


@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(0, 9)), elements=_VALUES),
       st.sampled_from([0, 1, -1]))
def test_same_as_numpy(x, axis):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanmedian(x, axis=axis) if x.shape[axis] else np.full(
            np.delete(x.shape, axis % 2), np.nan)
    got = nanmedian(x, axis=axis)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, equal_nan=True)
