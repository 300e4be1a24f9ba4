"""The daemon's live view of each job: registered ranks and groups, recent telemetry, and the
detection engine that runs on it. Fed only with writes that were stored for the first time."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.links import ConnResolver
from diagnosis.store import ConnRows, GroupRecord, OpRows, RankRecord, Write

log = logging.getLogger(__name__)


def _new_engine(topology: Any) -> Any:
    try:
        from diagnosis.engine import Engine
    except ImportError:  # the engine is optional for a pure ingest daemon
        return None
    return Engine(topology=topology)


@dataclass
class JobState:
    job: str
    attempt: int
    engine: Any
    ranks: dict[int, RankRecord] = field(default_factory=dict)
    groups: dict[str, GroupRecord] = field(default_factory=dict)
    records: int = 0
    last_ns: int = 0
    links: ConnResolver = field(default_factory=ConnResolver)


class LiveView:
    def __init__(self, hub: FaultHub, *, topology: Any = None) -> None:
        self._hub = hub
        self._topology = topology
        self._jobs: dict[tuple[str, int], JobState] = {}
        self._lock = threading.Lock()
        # (time, records) of recent stored batches, for the ingest rate
        self._rate: deque[tuple[float, int]] = deque(maxlen=4096)
        self.records_total = 0

    def _job(self, job: str, attempt: int) -> JobState | None:
        """The live state of a job attempt; None for an attempt older than one already seen
        (a restarted job's earlier processes are gone: their silence is not a fault)."""
        key = (job, attempt)
        state = self._jobs.get(key)
        if state is None:
            if any(j == job and a > attempt for j, a in self._jobs):
                return None
            for old in [k for k in self._jobs if k[0] == job]:
                log.info("job %s attempt %d replaces attempt %d in the live view", job,
                         attempt, old[1])
                del self._jobs[old]
            state = self._jobs[key] = JobState(job, attempt, _new_engine(self._topology))
        return state

    def apply(self, writes: list[Write]) -> None:
        """Called by the writer with freshly stored writes, in arrival order."""
        with self._lock:
            for w in writes:
                body = w.body
                if isinstance(body, OpRows):
                    self.records_total += len(body.cols)
                    self._rate.append((time.monotonic(), len(body.cols)))
                st = self._job(body.job, body.attempt)
                if st is None:
                    continue
                if isinstance(body, RankRecord):
                    st.ranks[body.rank] = body
                    if st.engine is not None:
                        st.engine.add_rank(body.rank, body.host, body.gpu or None,
                                           body.nic or None)
                elif isinstance(body, GroupRecord):
                    st.groups[body.pg] = body
                    if st.engine is not None:
                        st.engine.add_group(body.pg, list(body.ranks))
                elif isinstance(body, OpRows):
                    n = len(body.cols)
                    st.records += n
                    if n:
                        st.last_ns = max(st.last_ns, int(np.max(body.cols["t_enter_ns"])))
                    if st.engine is not None:
                        st.engine.add_ops(body.cols)
                elif isinstance(body, ConnRows):
                    conns = st.links.add(body.cols)
                    if st.engine is not None and conns is not None and len(conns):
                        st.engine.add_conns(conns)

    def analyze(self, now_ns: int | None = None) -> int:
        """Run every job's detectors once; file what they report. Returns reports filed."""
        now_ns = now_ns or time.time_ns()
        with self._lock:
            found = [(st.job, st.engine.advance(now_ns)) for st in self._jobs.values()
                     if st.engine is not None]
        filed = 0
        for job, reports in found:
            for report in reports:
                self._hub.file(job, report)
                filed += 1
        return filed

    def rate(self, window_s: float = 60.0) -> float:
        now = time.monotonic()
        recent = [n for t, n in list(self._rate) if now - t <= window_s]
        if not recent:
            return 0.0
        oldest = min(t for t, _ in list(self._rate) if now - t <= window_s)
        return sum(recent) / max(now - oldest, 1.0)
