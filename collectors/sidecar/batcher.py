"""Merge the op batches of a node's ranks into larger batches per job attempt.

Registration messages (ranks, groups) pass straight through, so they always precede the records
that follow them; op rows wait up to ``flush_interval_s`` or until ``batch_records`` gather.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from proto import c4_pb2
from proto.codec import Columns, concat, decode_ops, encode_ops

Emit = Callable[..., None]  # Outbox.put(**body)


class Batcher:
    def __init__(self, emit: Emit, *, batch_records: int, flush_interval_s: float) -> None:
        self._emit = emit
        self._batch_records = batch_records
        self._interval = flush_interval_s
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], list[Columns]] = {}
        self._counts: dict[tuple[str, int], int] = {}
        self._since: dict[tuple[str, int], float] = {}

    def add_ops(self, batch: c4_pb2.OpBatch) -> None:
        """Raises proto.codec.BatchError for a malformed batch (the caller drops it)."""
        self.add_columns(batch.job, batch.attempt, decode_ops(batch))

    def add_columns(self, job: str, attempt: int, cols: Columns) -> None:
        """Decoded op rows of one job attempt (the edge's choice of what to ship)."""
        if not len(cols):
            return
        key = (job, attempt)
        with self._lock:
            self._pending.setdefault(key, []).append(cols)
            self._counts[key] = self._counts.get(key, 0) + len(cols)
            self._since.setdefault(key, time.monotonic())
            if self._counts[key] >= self._batch_records:
                self._flush(key)

    def passthrough(self, **body: object) -> None:
        self._emit(**body)

    def flush_due(self, *, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, t in self._since.items() if force or now - t >= self._interval]:
                self._flush(key)

    def _flush(self, key: tuple[str, int]) -> None:
        parts = self._pending.pop(key, [])
        self._counts.pop(key, None)
        self._since.pop(key, None)
        if parts:
            self._emit(ops=encode_ops(key[0], concat(parts), attempt=key[1]))
