"""Which sidecar carries each rank's records, and how far each sidecar's deliveries have come.

A rank is taken to have stopped reporting when its peers finished a call without a record from
it. A sidecar whose stream lags (its outbox draining after a push-back, or starved among
thousands of streams) delivers every rank it carries late, and may deliver nothing for many
seconds: that silence is the stream's, not the ranks'. What tells them apart is the rank's own
sidecar: when records it sent from after the call arrived, the rank's would have come with them.
"""

from __future__ import annotations

import numpy as np

from diagnosis.engine.hang_reports import Delivery


class Channels:
    """Per job attempt: the sidecar each rank registered through, and per sidecar the newest
    record time it delivered and when its deliveries last moved (on the clock of the analysis
    passes, as the engine's own silences)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._until: list[int] = []
        self._writes: list[int] = []
        self._writes_was = np.zeros(0, dtype=np.int64)
        self._moved_ns = np.zeros(0, dtype=np.int64)
        self._rank = np.full(0, -1, dtype=np.int64)

    def carried(self, sidecar: str, t_ns: int) -> int:
        """A write from ``sidecar`` holding records up to ``t_ns``; returns the sidecar's id."""
        cid = self._ids.get(sidecar)
        if cid is None:
            cid = self._ids[sidecar] = len(self._until)
            self._until.append(-1)
            self._writes.append(0)
        self._until[cid] = max(self._until[cid], int(t_ns))
        self._writes[cid] += 1
        return cid

    def register(self, rank: int, cid: int) -> None:
        """``rank`` registered through sidecar ``cid``: its records come that way."""
        if rank < 0:
            return
        if rank >= len(self._rank):
            grown = np.full(max(rank + 1, 2 * len(self._rank)), -1, dtype=np.int64)
            grown[: len(self._rank)] = self._rank
            self._rank = grown
        self._rank[rank] = cid

    def delivery(self, now_ns: int) -> Delivery | None:
        """At an analysis pass at ``now_ns``: per rank, the time its sidecar's deliveries
        reached and how long they have not moved (-1: not known); None before any rank
        registered."""
        writes = np.asarray(self._writes, dtype=np.int64)
        grow = len(writes) - len(self._writes_was)
        if grow:
            self._writes_was = np.r_[self._writes_was, np.zeros(grow, dtype=np.int64)]
            self._moved_ns = np.r_[self._moved_ns, np.full(grow, now_ns, dtype=np.int64)]
        self._moved_ns[writes > self._writes_was] = now_ns
        self._writes_was = writes
        known = self._rank >= 0
        if not known.any():
            return None
        cid = np.where(known, self._rank, 0)
        until = np.where(known, np.asarray(self._until, dtype=np.int64)[cid], -1)
        quiet = np.where(known, now_ns - self._moved_ns[cid], -1)
        return Delivery(until, quiet)
