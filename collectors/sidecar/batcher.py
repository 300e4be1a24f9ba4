"""Merge the op frames of a node's ranks into larger batches per job attempt.

Frames arrive already logged (``spill.FrameRef``); a batch closes after ``flush_interval_s``, or
once ``batch_records`` records or ``batch_bytes`` bytes gather, and goes to the outbox as one
request naming its frames (the outbox logs that cut). Registration messages (ranks, groups)
never pass through here: they are queued at once, so they always precede the records that
follow them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from c4.proto import c4_pb2
from c4.proto.codec import Columns, concat, encode_ops
from collectors.sidecar.spill import FrameRef, Key

Emit = Callable[[list[FrameRef], c4_pb2.IngestRequest], None]  # Outbox.put_frames


class Batcher:
    def __init__(self, emit: Emit, *, batch_records: int, flush_interval_s: float,
                 batch_bytes: int = 4 << 20) -> None:
        self._emit = emit
        self._batch_records = batch_records
        self._batch_bytes = batch_bytes
        self._interval = flush_interval_s
        self._lock = threading.Lock()
        self._pending: dict[Key, list[tuple[Columns, FrameRef]]] = {}
        self._counts: dict[Key, tuple[int, int]] = {}  # records, bytes
        self._since: dict[Key, float] = {}

    def add(self, cols: Columns, frame: FrameRef, nbytes: int) -> None:
        key = frame.key
        with self._lock:
            self._pending.setdefault(key, []).append((cols, frame))
            records, size = self._counts.get(key, (0, 0))
            records, size = records + len(cols), size + nbytes
            self._counts[key] = (records, size)
            self._since.setdefault(key, time.monotonic())
            if records >= self._batch_records or size >= self._batch_bytes:
                self._flush(key)

    def flush_due(self, *, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, t in self._since.items() if force or now - t >= self._interval]:
                self._flush(key)

    def _flush(self, key: Key) -> None:
        parts = self._pending.pop(key, [])
        self._counts.pop(key, None)
        self._since.pop(key, None)
        if parts:
            ops = encode_ops(key[0], concat([c for c, _ in parts]), attempt=key[1])
            self._emit([f for _, f in parts], c4_pb2.IngestRequest(ops=ops))
