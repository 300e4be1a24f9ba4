"""The collectors' signs of life waiting for the next pass: per rank, the newest its sidecar said.

Every sidecar sends its collectors' counters each second (``SidecarStats``): per rank, when its
collector last spoke, whether its process is exiting, and the calls it has recorded. A frozen
rank stops speaking while a rank blocked by it in the same call goes on, which op records alone
cannot tell apart. A 131,072-rank job sends 131k such entries a second, so they are kept per job
as the columns came (no Python step per rank) and merged to one entry per rank when taken, or
earlier when too many wait.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import collector_counts

#: entries that may wait for the next pass; past it they are merged to one per rank, and
#: ranks beyond it are dropped (counted)
MAX_WAITING = 1 << 20

JobKey = tuple[str, int]


@dataclass(frozen=True)
class Beats:
    """One entry per rank (after ``newest``): its latest sign of life, whether its process said
    it is exiting, and the most calls it has recorded."""

    rank: np.ndarray       # int64
    t_ns: np.ndarray       # int64
    recorded: np.ndarray   # int64
    leaving: np.ndarray    # bool

    def __len__(self) -> int:
        return len(self.rank)

    def where(self, keep: np.ndarray) -> Beats:
        return Beats(self.rank[keep], self.t_ns[keep], self.recorded[keep], self.leaving[keep])


def newest(parts: list[Beats]) -> Beats:
    """One entry per rank: its newest time, the most calls recorded, leaving if any said so."""
    rank = np.concatenate([p.rank for p in parts])
    t = np.concatenate([p.t_ns for p in parts])
    rec = np.concatenate([p.recorded for p in parts])
    leaving = np.concatenate([p.leaving for p in parts])
    order = np.lexsort((t, rank))
    rank, t, rec, leaving = rank[order], t[order], rec[order], leaving[order]
    start = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    last = np.r_[start[1:] - 1, len(rank) - 1]
    return Beats(rank[start], t[last], np.maximum.reduceat(rec, start),
                 np.logical_or.reduceat(leaving, start))


class Heartbeats:
    """Thread-safe: ingest threads ``add``, the detectors' thread ``take``s."""

    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self._max = max_waiting
        self._lock = threading.Lock()
        self._parts: dict[JobKey, list[Beats]] = {}
        self._waiting = 0
        #: entries dropped because more ranks waited than ``max_waiting``
        self.dropped = 0

    def add(self, stats: c4_pb2.SidecarStats) -> None:
        """A sidecar's statistics; raises ``BatchError`` for counters that do not decode."""
        fresh: list[tuple[JobKey, Beats]] = []
        for job, attempt, cols in collector_counts(stats):
            spoke = cols["t_ns"] > 0   # a collector that has not spoken yet says nothing
            if spoke.any():
                fresh.append(((job, attempt), Beats(
                    cols["rank"][spoke].astype(np.int64), cols["t_ns"][spoke].astype(np.int64),
                    cols["recorded"][spoke].astype(np.int64),
                    cols["leaving"][spoke].astype(bool))))
        if not fresh:
            return
        with self._lock:
            for key, beats in fresh:
                if self._waiting + len(beats) > self._max:
                    self._compact()
                    if self._waiting + len(beats) > self._max:
                        self.dropped += len(beats)
                        continue
                self._parts.setdefault(key, []).append(beats)
                self._waiting += len(beats)

    def take(self) -> dict[JobKey, Beats]:
        """Everything heard since the last call, one entry per rank of each job."""
        with self._lock:
            parts, self._parts, self._waiting = self._parts, {}, 0
        return {key: newest(p) for key, p in parts.items()}

    def _compact(self) -> None:
        for key, parts in self._parts.items():
            self._parts[key] = [newest(parts)]
        self._waiting = sum(len(p[0]) for p in self._parts.values())
