"""Group commit: gather ingest requests, store them in one call, then acknowledge them.

A request is acknowledged only after the store has made it durable, so a daemon killed at any
moment loses nothing that a sidecar believes delivered. While the store is down the writer keeps
retrying the same requests and acknowledges none of them; the ingest streams stop reading once
``max_pending`` requests or ``max_pending_records`` rows wait (whichever comes first: requests
vary from one row to a whole message), which pushes back on the sidecars (they spill to disk).
One commit carries at most ``max_commit_records`` rows: a store turns a commit into Python
objects (ClickHouse: lists of every column), and the daemon's resident size follows its largest
commit, which grew whenever the store fell behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Histogram

from diagnosis.errors import StoreError
from diagnosis.store import Store, Write

log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the daemon's request-latency histograms.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Done = Callable[[bool], None]  # called with "was a duplicate" once the write is durable


@dataclass
class _Item:
    write: Write
    done: Done
    records: int


def _records(w: Write) -> int:
    cols = getattr(w.body, "cols", None)
    return len(cols) if cols is not None else 1


class Writer:
    def __init__(self, store: Store, *, on_stored: Callable[[list[Write]], None],
                 commit_interval_s: float = 0.02, max_pending: int = 512,
                 max_pending_records: int = 1_000_000,
                 max_commit_records: int = 131_072) -> None:
        self._store = store
        self._on_stored = on_stored
        self._interval = commit_interval_s
        self._max_pending = max_pending
        self._max_records = max_pending_records
        self._max_commit = max_commit_records
        self._items: list[_Item] = []
        self._records = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="c4-writer", daemon=True)
        self.stored = 0
        self.duplicates = 0
        self.store_errors = 0
        # requests submitted, and processed (stored or found stored), since the start
        self._submitted = 0
        self._processed = 0
        # rows committed, and the seconds their commits took: the store's throughput while it
        # works (the governor compares it with what the jobs send)
        self.rows_stored = 0
        self.store_s = 0.0
        #: why the last store write failed, while it keeps failing ("" once one succeeds)
        self.store_error = ""
        #: every commit's duration (served by ``component_metrics.WriterCollector``)
        self.commit_seconds = Histogram("c4_daemon_store_write_seconds",
                                        "Duration of one group commit into the store.",
                                        buckets=LATENCY_BUCKETS, registry=None)

    def start(self) -> None:
        self._thread.start()

    def submit(self, write: Write, done: Done) -> None:
        """Queue a write; blocks while too many are pending (backpressure)."""
        n = _records(write)
        with self._cond:
            # one request larger than the whole bound still goes, alone
            while self._items and not self._stopping and (
                    len(self._items) >= self._max_pending or
                    self._records + n > self._max_records):
                self._cond.wait(0.1)
            self._items.append(_Item(write, done, n))
            self._records += n
            self._submitted += 1
            self._cond.notify_all()

    def sync(self, timeout: float = 30.0) -> bool:
        """Wait until every request submitted before this call is stored; False on timeout
        (the store is down)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._submitted
            while self._processed < target:
                left = deadline - time.monotonic()
                if left <= 0 or (self._stopping and not self._thread.is_alive()):
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    def pending(self) -> int:
        with self._cond:
            return len(self._items)

    def pending_records(self) -> int:
        with self._cond:
            return self._records

    def throughput(self) -> tuple[int, float]:
        """Rows committed since the start, and the seconds their commits took."""
        with self._cond:
            return self.rows_stored, self.store_s

    def stop(self, timeout: float = 30.0) -> None:
        """Store everything submitted so far, then stop."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("writer did not drain within %.0f s; %d requests stay unacknowledged "
                      "(sidecars will resend them)", timeout, self.pending())

    def _take(self) -> list[_Item]:
        with self._cond:
            while not self._items and not self._stopping:
                self._cond.wait()
            if not self._items:
                return []
        # Let a few more requests arrive so that one transaction carries many of them.
        if not self._stopping and self._records < self._max_commit:
            time.sleep(self._interval)
        with self._cond:
            take, rows = 0, 0
            for it in self._items:  # at least one request, however large
                if take and rows + it.records > self._max_commit:
                    break
                take += 1
                rows += it.records
            items, self._items = self._items[:take], self._items[take:]
            self._records -= rows
            self._cond.notify_all()
            return items

    def _run(self) -> None:
        backoff = 0.2
        while True:
            items = self._take()
            if not items:
                return
            while True:
                t0 = time.perf_counter()
                try:
                    dups = self._store.write([it.write for it in items])
                    break
                except StoreError as exc:
                    self.store_errors += 1
                    self.store_error = str(exc)
                    log.warning("store unavailable (%s); retrying %d requests in %.1f s",
                                exc, len(items), backoff)
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
            backoff = 0.2
            took = time.perf_counter() - t0
            self.commit_seconds.observe(took)
            with self._cond:
                self.rows_stored += sum(it.records for it in items)
                self.store_s += took
            self.store_error = ""
            fresh = [it.write for it, dup in zip(items, dups) if not dup]
            self.stored += len(fresh)
            self.duplicates += len(items) - len(fresh)
            try:
                self._on_stored(fresh)
            except Exception:  # the live view must never stop acknowledgements
                log.exception("live analysis failed on a stored batch")
            for it, dup in zip(items, dups):
                it.done(dup)
            with self._cond:
                self._processed += len(items)
                self._cond.notify_all()
