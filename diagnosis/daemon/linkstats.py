"""Name the peer rank of ``linkstat`` rows that sidecars ship keyed by socket endpoints.

A sidecar sees one end of a connection: ``src`` (the rank owning the socket), its local and
remote endpoints, and ``dst`` only when both ends are local. The peer is the rank whose socket
has this row's remote endpoint as its local one, which the daemon learns from every node's rows
(and raw samples). Rows whose peer is not known yet wait up to ``hold_s`` for the other node's
rows, then are dropped and counted: the engine cannot place a connection without both ends.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import numpy as np

from c4.proto.codec import Columns, concat
from diagnosis.daemon.batches import linkstat_records
from diagnosis.engine.records import LinkStatRecords

log = logging.getLogger(__name__)

MAX_WAITING_ROWS = 1 << 20


class LinkStatResolver:
    """Per job attempt; not thread-safe (the live view's lock)."""

    def __init__(self, hold_s: float = 10.0) -> None:
        self.hold_s = hold_s
        self.owner: dict[str, int] = {}
        self._waiting: deque[tuple[float, Columns]] = deque()
        self._waiting_rows = 0
        self.dropped = 0
        self.resolved = 0

    def learn(self, ranks: np.ndarray, endpoints: list[str]) -> None:
        """The rank owning each local endpoint (from linkstat rows or raw samples)."""
        self.owner.update(zip(endpoints, np.asarray(ranks).tolist(), strict=True))

    def add(self, cols: Columns, now: float | None = None) -> LinkStatRecords | None:
        """Rows of a LinkStatBatch (``c4.proto.codec.LINKSTAT_COLUMNS``); returns the rows whose
        peer is known now (these and earlier ones that waited for it)."""
        now = time.monotonic() if now is None else now
        if len(cols):
            names = np.asarray(cols.strings, dtype=object)
            self.learn(cols["src"], names[cols["local"]].tolist())
        ready: list[tuple[Columns, np.ndarray]] = []
        entries = [*self._waiting, (now, cols)] if len(cols) else list(self._waiting)
        self._waiting, self._waiting_rows = deque(), 0
        for since, part in entries:
            dst = self._peers(part)
            unknown = dst < 0
            if not unknown.all():
                ready.append((_take(part, ~unknown), dst[~unknown]))
            if not unknown.any():
                continue
            if now - since > self.hold_s or self._waiting_rows > MAX_WAITING_ROWS:
                if not self.dropped:
                    log.warning("linkstat rows whose peer no node has named within %.0f s are "
                                "dropped (the other end's sidecar is missing or its rows are "
                                "late)", self.hold_s)
                self.dropped += int(unknown.sum())
            else:
                self._waiting.append((since, _take(part, unknown)))
                self._waiting_rows += int(unknown.sum())
        if not ready:
            return None
        batch = concat([c for c, _ in ready]) if len(ready) > 1 else ready[0][0]
        dst = np.concatenate([d for _, d in ready])
        self.resolved += len(dst)
        return linkstat_records(batch, dst)

    def waiting(self) -> int:
        return self._waiting_rows

    def _peers(self, cols: Columns) -> np.ndarray:
        dst = np.asarray(cols["dst"], dtype=np.int64).copy()
        need = np.flatnonzero(dst < 0)
        if len(need):
            names = np.asarray(cols.strings, dtype=object)
            remote = names[cols["remote"][need]].tolist()
            dst[need] = [self.owner.get(ep, -1) for ep in remote]
        return dst


def _take(cols: Columns, mask: np.ndarray) -> Columns:
    return Columns({k: v[mask] for k, v in cols.columns.items()}, cols.strings)
