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


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else c >> 1
        table[i] = c
    return table


_TABLE = _crc_table()
_DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)


def prefix_state(pg: str) -> int:
    """The crc32 register after ``f"{pg}:"`` (for :func:`sampled_after`)."""
    return zlib.crc32(f"{pg}:".encode()) ^ 0xFFFFFFFF


def sampled_seqs(pg: str, seqs: np.ndarray, k: int) -> np.ndarray:
    """:func:`is_sampled` of calls ``seqs`` (non-negative) of one communicator, as a boolean
    array, without a Python step per call."""
    seqs = np.asarray(seqs, dtype=np.int64)
    return sampled_after(np.full(len(seqs), prefix_state(pg), dtype=np.uint32), seqs, k)


def sampled_after(states: np.ndarray, seqs: np.ndarray, k: int) -> np.ndarray:
    """:func:`is_sampled` of calls whose communicators' :func:`prefix_state` are ``states``
    (one per call, so calls of many communicators go at once): zlib's table-driven crc32
    update over the decimal digits of every seq at once."""
    seqs = np.asarray(seqs, dtype=np.int64)
    n = len(seqs)
    if k <= 1:
        return np.ones(n, dtype=bool)
    if not n:
        return np.zeros(0, dtype=bool)
    if int(seqs.min()) < 0:
        raise ValueError("sampled_after takes non-negative sequence numbers")
    width = len(str(int(seqs.max())))
    digits = np.empty((width, n), dtype=np.uint32)
    rest = seqs.copy()
    for j in range(width - 1, -1, -1):      # the least significant digit last in the text
        rest, d = np.divmod(rest, 10)
        digits[j] = _DIGITS[d]
    state = np.asarray(states, dtype=np.uint32).copy()
    eight = np.uint32(8)
    for j in range(width):
        nxt = _TABLE[(state ^ digits[j]) & 0xFF] ^ (state >> eight)
        if j == width - 1:
            state = nxt
            continue
        live = seqs >= 10 ** (width - 1 - j)  # shorter numbers start further right
        state = nxt if live.all() else np.where(live, nxt, state)
    return ((state ^ np.uint32(0xFFFFFFFF)) % np.uint32(k)) == 0
