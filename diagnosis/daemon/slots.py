"""Caps on long-lived streams: each open stream holds one RPC thread for as long as it lasts, so
every kind (ingest streams, fault watches) gets a share of the threads and no more, and the
rest stay free for queries and ``c4 status``."""

from __future__ import annotations

import threading


class Slots:
    """At most ``limit`` holders at once."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a stream cap must be at least 1, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._used = 0
        self.refused = 0

    def take(self) -> bool:
        """A slot, or False when all are held (the caller refuses the stream)."""
        with self._lock:
            if self._used >= self.limit:
                self.refused += 1
                return False
            self._used += 1
            return True

    def give(self) -> None:
        with self._lock:
            self._used -= 1

    @property
    def used(self) -> int:
        return self._used
