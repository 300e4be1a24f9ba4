"""What the sidecar gave up, and why: every record lost anywhere on the node is counted here,
shown by ``c4 status`` (the sidecar's ``dropped``) and by the sidecar's metrics, by reason."""

from __future__ import annotations

import threading

# reason -> what it means (the metrics' help text lists them)
REASONS: dict[str, str] = {
    "disk_full": "no room in the write-ahead log (disk full, or --spill-max-bytes reached)",
    "memory_full": "a request that could not be logged and did not fit in memory",
    "rejected": "the daemon refused the request for good (malformed, unknown job)",
    "oversize": "a request larger than the daemon takes (--max-request-bytes)",
    "corrupt": "a record of the write-ahead log failed its checksum",
    "not_owner": "a frame for a job that another user's ranks own on this node",
    "malformed": "a frame that does not decode",
    "bounds": "frames beyond what one connection may register or report (ranks, statistics)",
    "shutdown": "a request held only in memory (not logged) when the sidecar stopped",
}


class Drops:
    """Counters of dropped records and refused frames, by reason. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, int] = {}
        self._frames: dict[str, int] = {}

    def add(self, reason: str, *, records: int = 0, frames: int = 0) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown drop reason {reason!r}")
        with self._lock:
            if records:
                self._records[reason] = self._records.get(reason, 0) + records
            if frames:
                self._frames[reason] = self._frames.get(reason, 0) + frames

    def records(self) -> dict[str, int]:
        with self._lock:
            return dict(self._records)

    def frames(self) -> dict[str, int]:
        with self._lock:
            return dict(self._frames)

    def records_total(self) -> int:
        with self._lock:
            return sum(self._records.values())

    def frames_total(self) -> int:
        with self._lock:
            return sum(self._frames.values())
