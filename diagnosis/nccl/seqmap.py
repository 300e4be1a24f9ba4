"""NCCL's per-collective-type counters -> c4's per-communicator sequence numbers.

NCCL numbers a communicator's collectives per type (``comm->seqNumber[func]``: the third
AllGather is AllGather #2 whatever ran between), and the Inspector numbers point-to-point
operations per communicator across both directions. c4 numbers a communicator's collectives in
one sequence (the same ``(pg, seq)`` names the same call on every member) and sends and receives
per pair and direction. Every member issues the same collectives in the same order, and on one
communicator they complete in that order, so a rank's own records say where each call stands:

    seq(call of type T, number s) = s + sum over the other types t of (calls of type t before it)

where "calls of type t before it" is one more than the highest number of type t the rank
completed before this call. Every rank computes the same value for the same call; the value is
the call's index in the communicator when no record is missing, and still the same on every
member when the Inspector left out the same small calls everywhere (``DUMP_MIN_SIZE_BYTES``).
Sends and receives count per (direction, peer) in completion order, which on one pair is their
order of issue.

:class:`SeqMapper` keeps the per-stream state (stream: one process on one communicator) so that
batches can come one at a time (a file read in blocks, or followed live); a batch costs numpy
operations, not a loop per record.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["SeqMapper", "StreamState", "launched_index"]

_BIG = 1 << 42     # larger than any sequence number NCCL reaches (2^42 calls)


@dataclass
class StreamState:
    """One stream's state: per collective type the highest number completed, the types whose
    numbers skipped (calls the Inspector left out), and per (op, peer) the p2p calls seen."""

    last: dict[str, int] = field(default_factory=dict)
    gappy: set[str] = field(default_factory=set)
    p2p: dict[tuple[str, int], int] = field(default_factory=dict)
    seq: int = -1          # the highest per-communicator seq given so far


@dataclass
class Mapped:
    """Sequence numbers of a batch's rows; ``dup`` marks rows that repeat an earlier call of
    their stream (a line written or read twice) or go back in its numbering."""

    seq: np.ndarray
    dup: np.ndarray


class SeqMapper:
    """Per-communicator sequence numbers for rows arriving stream by stream in completion
    order (within each stream; streams may interleave)."""

    def __init__(self) -> None:
        self.streams: dict[Hashable, StreamState] = {}

    def state(self, stream: Hashable) -> StreamState:
        st = self.streams.get(stream)
        if st is None:
            st = self.streams[stream] = StreamState()
        return st

    def map(self, streams: Sequence[Hashable], stream: np.ndarray, ops: Sequence[str],
            op: np.ndarray, sn: np.ndarray, peer: np.ndarray) -> Mapped:
        """Sequence numbers for rows in completion order: ``stream`` indexes ``streams`` (the
        stream keys), ``op`` indexes ``ops`` (trace op names); ``sn`` is NCCL's number and
        ``peer`` the peer's communicator rank (-1 for collectives)."""
        n = len(sn)
        seq = np.full(n, -1, dtype=np.int64)
        dup = np.zeros(n, dtype=bool)
        if not n:
            return Mapped(seq, dup)
        p2p = peer >= 0
        if (~p2p).any():
            idx = np.flatnonzero(~p2p)
            s, d = self._collectives(streams, stream[idx], ops, op[idx], sn[idx])
            seq[idx], dup[idx] = s, d
        if p2p.any():
            idx = np.flatnonzero(p2p)
            seq[idx] = self._p2p(streams, stream[idx], ops, op[idx], peer[idx])
        return Mapped(seq, dup)

    def _collectives(self, streams: Sequence[Hashable], stream: np.ndarray, ops: Sequence[str],
                     op: np.ndarray, sn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(sn)
        order = np.argsort(stream, kind="stable")
        g = stream[order].astype(np.int64)
        t = op[order]
        s = sn[order].astype(np.int64)
        head = np.r_[True, g[1:] != g[:-1]]
        ustreams = g[head]
        states = [self.state(streams[int(x)]) for x in ustreams.tolist()]
        seg_of = np.cumsum(head) - 1
        types = sorted({ops[int(x)] for x in np.unique(t).tolist()}
                       | {k for st in states for k in st.last})
        type_id = {name: i for i, name in enumerate(types)}
        row_type = np.asarray([type_id.get(name, -1) for name in ops], dtype=np.int64)[t]
        total = s.copy()
        own_before = np.full(n, -1, dtype=np.int64)
        new_last: list[np.ndarray] = []
        for k, name in enumerate(types):
            carried = np.asarray([st.last.get(name, -1) for st in states], dtype=np.int64)
            v = np.where(row_type == k, s, -1)
            # running max within each stream, then before the row (exclusive), with the carry
            incl = np.maximum.accumulate(g * _BIG + (v + 1)) - g * _BIG - 1
            incl = np.maximum(incl, carried[seg_of])
            excl = np.r_[-1, incl[:-1]]
            excl = np.where(head, carried[seg_of], excl)
            mine = row_type == k
            own_before[mine] = excl[mine]
            total += np.where(mine, 0, excl + 1)
            last_of_seg = np.r_[np.flatnonzero(head)[1:] - 1, n - 1]
            new_last.append(incl[last_of_seg])
        dup = s <= own_before
        gap = s > own_before + 1
        for j, st in enumerate(states):
            for k, name in enumerate(types):
                last = int(new_last[k][j])
                if last >= 0:
                    st.last[name] = last
        for j, k in set(zip(seg_of[gap].tolist(), row_type[gap].tolist())):
            states[j].gappy.add(types[k])
        seq = np.empty(n, dtype=np.int64)
        dups = np.empty(n, dtype=bool)
        seq[order], dups[order] = total, dup
        for j, st in enumerate(states):
            rows = (seg_of == j) & ~dup
            if rows.any():
                st.seq = max(st.seq, int(total[rows].max()))
        return seq, dups

    def _p2p(self, streams: Sequence[Hashable], stream: np.ndarray, ops: Sequence[str],
             op: np.ndarray, peer: np.ndarray) -> np.ndarray:
        n = len(op)
        key = (stream.astype(np.int64) * len(ops) + op.astype(np.int64)) * _BIG + peer
        uniq, inv = np.unique(key, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        sorted_inv = inv[order]
        head = np.r_[True, sorted_inv[1:] != sorted_inv[:-1]]
        starts = np.flatnonzero(head)
        pos = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
        base = np.empty(len(uniq), dtype=np.int64)
        counts = np.bincount(inv, minlength=len(uniq))
        for j, k in enumerate(uniq.tolist()):
            p = k % _BIG
            rest = k // _BIG
            st = self.state(streams[rest // len(ops)])
            name = ops[rest % len(ops)]
            base[j] = st.p2p.get((name, p), 0)
            st.p2p[(name, p)] = int(base[j] + counts[j])
        out = np.empty(n, dtype=np.int64)
        out[order] = base[sorted_inv] + pos
        return out


def launched_index(counts: dict[str, int], last: dict[str, int] | None, frontier: int,
                   gappy: set[str] | frozenset[str] = frozenset()) -> int:
    """The per-communicator seq of the last call a rank launched, from RAS's per-type launch
    counts. With a known ``frontier`` (the seq of the rank's last completed call, ``last`` the
    highest number of each type completed up to it) the calls launched since are added to it;
    a type whose numbers skipped (the Inspector leaves out small calls) adds nothing, since its
    calls past the frontier may all be small ones long done. Without a frontier (``last`` None:
    no completed record) every launched call counts: the index is the sum of the counts - 1."""
    if last is None:
        return sum(max(int(c), 0) for c in counts.values()) - 1
    ahead = 0
    for name, c in counts.items():
        if name in gappy:
            continue
        ahead += max(int(c) - (last.get(name, -1) + 1), 0)
    return frontier + ahead
