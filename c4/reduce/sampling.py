"""Which op rows a reduced stream keeps (trace format version 2, ``meta.sample``)."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import Columns
from c4.proto.sampling import sampled_mask
from c4.reduce.keys import group_starts

STATUS_OK = 0


def kept_rows(ops: Columns, k: int) -> np.ndarray:
    """Mask of the op rows kept at sampling factor ``k``: the calls whose ``(pg, seq)`` is
    sampled (``c4.proto.sampling``), and every row whose status is not ok, sampled or not, since
    an error is rare and urgent. An open row (no ``t_end_ns``) is kept only if sampled: the
    progress records say that a call is in flight."""
    n = len(ops)
    if k <= 1:
        return np.ones(n, dtype=bool)
    if not n:
        return np.zeros(0, dtype=bool)
    pg = np.asarray(ops["pg"], dtype=np.int64)
    seq = np.asarray(ops["seq"], dtype=np.int64)
    # every member of a communicator has a row for the same call: hash each call once
    order, first = group_starts(pg, seq)
    starts = order[first]
    names = np.asarray(ops.strings, dtype=object)[pg[starts]].tolist()
    keep_call = sampled_mask(names, seq[starts].tolist(), k)
    keep = np.empty(n, dtype=bool)
    keep[order] = keep_call[np.cumsum(first) - 1]
    return keep | (np.asarray(ops["status"]) != STATUS_OK)


def take(ops: Columns, mask: np.ndarray) -> Columns:
    """The rows of ``ops`` under ``mask`` (a boolean mask, or row indices in the order
    wanted), same string table; error texts follow their rows."""
    rows = np.flatnonzero(mask) if mask.dtype == bool else mask
    new = {int(old): i for i, old in enumerate(rows.tolist())} if ops.error_text else {}
    return Columns({k: v[rows] for k, v in ops.columns.items()}, ops.strings,
                   {new[r]: t for r, t in ops.error_text.items() if r in new})
