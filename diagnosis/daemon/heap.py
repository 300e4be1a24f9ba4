"""The daemon's heap and Python's cyclic garbage collector.

A daemon following a job of 100k ranks holds tens of millions of long-lived objects (ranks,
groups, connections, their series). Python's full collection examines every one of them each
time the heap has grown by a quarter: while such a job registers and its connections appear,
that was a pause of up to a second every 10-20 s in which every thread of the daemon stood
still and nothing was freed (``bench.scale.job --ranks 131072``). :class:`HeapKeeper` moves what
survives a full collection that freed little into the permanent generation (``gc.freeze``):
later full collections examine only what came since.

Frozen objects that later become cyclic garbage are not freed while frozen: the keeper thaws
everything when a job leaves the daemon's view (its state is such garbage) and every
``thaw_s``, so the next full collection frees them.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from c4.metrics import labelled

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeapConfig:
    #: a full collection that freed fewer objects than this found long-lived state only
    freeze_below: int = 10_000
    #: full collections shorter than this are left alone (a small heap costs nothing)
    min_pause_s: float = 0.02
    #: everything is thawed this often, so cyclic garbage among frozen objects is freed
    thaw_s: float = 900.0
    #: collections at least this long are logged
    log_pause_s: float = 1.0


class HeapKeeper:
    """Times every collection (the ``gc`` callbacks) and freezes or thaws the heap when
    :meth:`maintain` is called, on the detectors' thread between passes (not inside a
    collection)."""

    def __init__(self, config: HeapConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or HeapConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self.seconds = [0.0, 0.0, 0.0]     # per generation, time spent collecting
        self.collections = [0, 0, 0]
        self.longest_s = 0.0
        self.freezes = 0
        self.thaws = 0
        self._started = 0.0
        self._freeze_due = False
        self._thaw_due = False
        self._long: list[tuple[int, float, int]] = []     # (generation, s, freed) to log
        self._thawed_at = clock()
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # runs inside the collection, on whichever thread triggered it: record only
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        gen = min(int(info["generation"]), 2)
        self.seconds[gen] += took
        self.collections[gen] += 1
        self.longest_s = max(self.longest_s, took)
        if gen == 2 and took >= self.config.min_pause_s \
                and info["collected"] < self.config.freeze_below:
            self._freeze_due = True
        if took >= self.config.log_pause_s:
            self._long.append((gen, took, int(info["collected"])))

    def thaw(self) -> None:
        """A job left: thaw at the next :meth:`maintain` (its state may be cyclic garbage)."""
        self._thaw_due = True

    def maintain(self) -> None:
        with self._lock:
            for gen, took, freed in self._long:
                log.info("garbage collection of generation %d took %.2f s and freed %d "
                         "objects", gen, took, freed)
            self._long.clear()
            now = self._clock()
            if self._thaw_due or now - self._thawed_at >= self.config.thaw_s:
                gc.unfreeze()
                self.thaws += 1
                self._thawed_at = now
                self._thaw_due = self._freeze_due = False
            elif self._freeze_due:
                gc.freeze()
                self.freezes += 1
                self._freeze_due = False

    def close(self) -> None:
        with self._lock:
            if self._on_gc in gc.callbacks:
                gc.callbacks.remove(self._on_gc)
            gc.unfreeze()


class HeapCollector(Collector):
    def __init__(self, heap: HeapKeeper) -> None:
        self.heap = heap

    def collect(self) -> Iterator[Metric]:
        h = self.heap
        yield labelled(CounterMetricFamily, "c4_daemon_gc_seconds",
                       "Time the daemon's process spent in Python's garbage collector (every "
                       "thread stands still meanwhile), by generation.", "generation",
                       [(str(g), s) for g, s in enumerate(h.seconds)])
        yield labelled(CounterMetricFamily, "c4_daemon_gc_collections",
                       "Collections of Python's garbage collector, by generation.",
                       "generation", [(str(g), float(n)) for g, n in enumerate(h.collections)])
        yield GaugeMetricFamily("c4_daemon_gc_longest_pause_seconds",
                                "The longest collection since the daemon started.",
                                value=h.longest_s)
        yield GaugeMetricFamily("c4_daemon_gc_frozen_objects",
                                "Objects in the permanent generation, which collections skip.",
                                value=gc.get_freeze_count())
