"""Per-job Prometheus series: how long a job's training step takes and how long its calls take.

Fed with every stored op batch (``observe``), read at scrape time (``collect``).

- ``c4_job_collective_seconds{job, kind}``: a histogram of the time each completed call took
  (end minus start, or minus entry when the collector saw no start), ``kind`` being
  ``collective`` or ``p2p`` (send/recv and their async forms).
- ``c4_job_step_seconds{job}``: the median of the job's recent step times. A step is found
  without knowing the training loop: the calls of the job's lowest rank repeat a pattern of
  (communicator, op, bytes) once per step, so the step is the shortest shift ``P`` under which
  nine in ten calls line up with the call ``P`` later, and a step's time is the time between a
  call and the one ``P`` later. A loop whose every call has the same signature (one
  communicator, one op, one size) shows the time between calls instead; a job whose calls are
  sampled (reduced telemetry) has too few in a row to show a step at all.

Cardinality is bounded: two latency series and one step series per job, for at most
``max_jobs`` jobs (the ones heard from most recently; a job silent for ``idle_s`` or pushed out
by newer jobs loses its series), so the series never exceed ``3 * max_jobs``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from c4.proto.codec import Columns
from diagnosis.store import OpRows, Write

#: Upper bounds of the call-time buckets (seconds): from a small NVLink all-reduce to a stall.
CALL_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_LE = (*(repr(b) for b in CALL_BUCKETS), "+Inf")
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
KINDS = ("collective", "p2p")
#: Calls of the followed rank kept per job to find its step, and the longest step (in calls).
RECENT_CALLS = 512
MAX_STEP_CALLS = 128
#: Share of calls that must line up with the call one step later.
STEP_MATCH = 0.9
#: Step times the gauge's median is taken over.
RECENT_STEPS = 32


@dataclass
class _JobSeries:
    counts: np.ndarray = field(
        default_factory=lambda: np.zeros((len(KINDS), len(CALL_BUCKETS) + 1), np.int64))
    sums: np.ndarray = field(default_factory=lambda: np.zeros(len(KINDS)))
    rank: int = -1                      # the rank whose calls give the step
    sigs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    t_enter: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_s: float | None = None
    step_stale: bool = False
    heard: float = 0.0


def step_seconds(sigs: np.ndarray, t_enter_ns: np.ndarray) -> float | None:
    """The median step time of a rank's calls in time order (signatures and entry times), or
    None when no shift up to ``MAX_STEP_CALLS`` lines up ``STEP_MATCH`` of them."""
    n = len(sigs)
    for shift in range(1, min(MAX_STEP_CALLS, n // 3) + 1):
        if np.mean(sigs[shift:] == sigs[:-shift]) >= STEP_MATCH:
            steps = (t_enter_ns[shift:] - t_enter_ns[:-shift])[-RECENT_STEPS:]
            return float(np.median(steps)) / 1e9
    return None


class JobSeries(Collector):
    """Per-job call-time histograms and step-time gauges, for the most recent ``max_jobs``."""

    def __init__(self, *, max_jobs: int = 256, idle_s: float = 1800.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")
        self.max_jobs = max_jobs
        self.idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, _JobSeries] = OrderedDict()
        self._bounds = np.asarray(CALL_BUCKETS)

    def observe(self, writes: Sequence[Write]) -> None:
        """Take the op rows of stored writes (other bodies are ignored)."""
        for w in writes:
            if isinstance(w.body, OpRows) and len(w.body.cols):
                self._observe_ops(w.body)

    def _observe_ops(self, body: OpRows) -> None:
        cols = body.cols
        t_end = cols["t_end_ns"]
        done = t_end >= 0        # an open row is replaced by its completed one later
        if not done.any():
            return
        start = np.where(cols["t_start_ns"] > 0, cols["t_start_ns"], cols["t_enter_ns"])[done]
        took = np.maximum(t_end[done] - start, 0) / 1e9
        names = np.asarray(cols.strings, dtype=object)
        is_p2p = np.array([str(s) in P2P_OPS for s in names], dtype=bool)
        kind = is_p2p[cols["op"][done]].astype(np.int64) if len(names) else \
            np.zeros(len(took), np.int64)
        width = len(CALL_BUCKETS) + 1
        cell = kind * width + np.searchsorted(self._bounds, took, side="left")
        counts = np.bincount(cell, minlength=len(KINDS) * width).reshape(len(KINDS), width)
        sums = np.bincount(kind, weights=took, minlength=len(KINDS))
        with self._lock:
            series = self._series(body.job)
            series.counts += counts
            series.sums += sums
            self._follow_steps(series, cols, done, names)

    def _series(self, job: str) -> _JobSeries:
        series = self._jobs.pop(job, None) or _JobSeries()
        series.heard = self._clock()
        self._jobs[job] = series          # most recently heard last
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)
        return series

    @staticmethod
    def _follow_steps(series: _JobSeries, cols: Columns, done: np.ndarray,
                      names: np.ndarray) -> None:
        ranks = cols["rank"][done]
        lowest = int(ranks.min())
        if series.rank < 0 or lowest < series.rank:
            series.rank = lowest
            series.sigs = np.zeros(0, np.int64)
            series.t_enter = np.zeros(0, np.int64)
        mine = np.flatnonzero(done)[ranks == series.rank]
        if not len(mine):
            return
        # a signature from the names, not the batch-local string indices
        text_hash = np.array([hash(str(s)) for s in names], dtype=np.int64)
        sigs = (text_hash[cols["pg"][mine]] * 31 + text_hash[cols["op"][mine]]) * 1_000_003 \
            + cols["nbytes"][mine]
        sigs = np.concatenate([series.sigs, sigs])
        t_enter = np.concatenate([series.t_enter, cols["t_enter_ns"][mine]])
        order = np.argsort(t_enter, kind="stable")[-RECENT_CALLS:]
        series.sigs, series.t_enter = sigs[order], t_enter[order]
        series.step_stale = True

    def forget(self, job: str) -> None:
        """Drop a job's series (it was removed)."""
        with self._lock:
            self._jobs.pop(job, None)

    def collect(self) -> Iterator[Metric]:
        calls = HistogramMetricFamily(
            "c4_job_collective_seconds",
            "Time each completed call of a job took, by kind (collective or p2p).",
            labels=["job", "kind"])
        steps = GaugeMetricFamily(
            "c4_job_step_seconds",
            "Median time of a job's recent training steps (its lowest rank's repeating "
            "pattern of calls); absent while no step is seen.", labels=["job"])
        with self._lock:
            self._evict_idle()
            for job, series in self._jobs.items():
                cumulative = np.cumsum(series.counts, axis=1).tolist()
                for k, kind in enumerate(KINDS):
                    if cumulative[k][-1]:
                        calls.add_metric([job, kind], list(zip(_LE, cumulative[k])),
                                         float(series.sums[k]))
                if series.step_stale:
                    series.step_s = step_seconds(series.sigs, series.t_enter)
                    series.step_stale = False
                if series.step_s is not None:
                    steps.add_metric([job], series.step_s)
        yield calls
        yield steps

    def _evict_idle(self) -> None:
        cutoff = self._clock() - self.idle_s
        for job in [j for j, s in self._jobs.items() if s.heard < cutoff]:
            del self._jobs[job]
