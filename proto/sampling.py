"""Which calls a reduced stream keeps (trace format version 2, ``meta.sample``).

A call ``(pg, seq)`` is kept when ``crc32(f"{pg}:{seq}") % K == 0``: every member of the
communicator computes the same answer without talking to the others, so a kept call is
complete across its members. For send/recv, ``seq`` is the per-pair sequence number, so the
k-th send a->b and the k-th recv on b from a are kept together.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np


def is_sampled(pg: str, seq: int, k: int) -> bool:
    """Whether call ``seq`` of communicator ``pg`` is kept at sampling factor ``k``."""
    return k <= 1 or zlib.crc32(f"{pg}:{seq}".encode()) % k == 0


def sampled_mask(pg: Iterable[str], seq: Iterable[int], k: int) -> np.ndarray:
    """:func:`is_sampled` of each (pg, seq) pair, as a boolean array."""
    pgs, seqs = list(pg), list(seq)
    if k <= 1:
        return np.ones(len(seqs), dtype=bool)
    crc = zlib.crc32
    return np.fromiter((crc(f"{p}:{s}".encode()) % k == 0 for p, s in zip(pgs, seqs,
                                                                          strict=True)),
                       dtype=bool, count=len(seqs))
