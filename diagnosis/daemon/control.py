"""Messages down the ingest streams: the daemon's side of ``Control``.

Each open ``Ingest.Stream`` registers here with a function that queues an ``IngestAck`` on it.
Requests accepted on a stream tell which jobs it carries and for which hosts (``RankInfo.host``,
``SidecarStats.host``). A job's sampling schedule goes to every stream that carries the job,
now and whenever a stream first carries it (a sidecar that reconnects, or a node that joins);
a detail request goes to the streams of the hosts it names. A detail answer is accepted only
for a request sent lately (so a sender cannot fill the store with detail nobody asked for).
The schedules of jobs no open stream carries are kept for when their sidecars come back, the
newest ``MAX_IDLE_SCHEDULES`` of them: a relay, which never hears that a job left, would
otherwise keep one for every job it ever carried.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from c4.proto import c4_pb2

log = logging.getLogger(__name__)

Push = Callable[[c4_pb2.IngestAck], None]
JobKey = tuple[str, int]
MAX_REQUESTS = 4096   # detail requests remembered for their answers
MAX_IDLE_SCHEDULES = 1024


@dataclass
class _Stream:
    push: Push
    hosts: set[str] = field(default_factory=set)
    jobs: set[JobKey] = field(default_factory=set)


def request_job(req: c4_pb2.IngestRequest) -> JobKey | None:
    """The job attempt a request belongs to (None for statistics, host internals and
    inspection answers)."""
    kind = req.WhichOneof("body")
    if kind is None or kind in ("stats", "host_topology"):
        return None
    body = getattr(req, kind)
    if not hasattr(body, "job"):   # answers to the daemon (inspections) belong to no job
        return None
    return (body.job, getattr(body, "attempt", 0))


class ControlHub:
    """Thread-safe: ingest threads register streams and report requests; the live view
    publishes schedules; the detail puller asks for records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[int, _Stream] = {}
        self._ids = itertools.count(1)
        self._schedules: dict[JobKey, c4_pb2.SampleSchedule] = {}
        # jobs with a schedule that no open stream carries, the longest idle first
        self._idle: OrderedDict[JobKey, None] = OrderedDict()
        # detail request id -> hosts asked (oldest requests forgotten past MAX_REQUESTS)
        self._expected: OrderedDict[int, set[str]] = OrderedDict()
        self.sent = 0

    # -- streams --------------------------------------------------------------------------
    def open(self, push: Push) -> int:
        with self._lock:
            sid = next(self._ids)
            self._streams[sid] = _Stream(push)
            return sid

    def close(self, sid: int) -> None:
        with self._lock:
            st = self._streams.pop(sid, None)
            if st is None:
                return
            carried = set().union(*(o.jobs for o in self._streams.values()))
            for job in st.jobs - carried:
                self._idle_now(job)

    def seen(self, sid: int, req: c4_pb2.IngestRequest) -> None:
        """A request accepted on stream ``sid``: note its job and host; a job new to the stream
        gets the job's schedule at once."""
        kind = req.WhichOneof("body")
        job = request_job(req)
        with self._lock:
            st = self._streams.get(sid)
            if st is None:
                return
            if kind == "rank" and req.rank.host:
                st.hosts.add(req.rank.host)
            elif kind == "stats" and req.stats.host:
                st.hosts.add(req.stats.host)
            elif kind == "host_topology" and req.host_topology.host:
                st.hosts.add(req.host_topology.host)
            if job is None or job in st.jobs:
                return
            st.jobs.add(job)
            self._idle.pop(job, None)
            schedule = self._schedules.get(job)
        if schedule is not None:
            self._send(st.push, c4_pb2.Control(schedule=schedule))

    def _send(self, push: Push, control: c4_pb2.Control) -> None:
        try:
            push(c4_pb2.IngestAck(seq=0, control=control))
            with self._lock:
                self.sent += 1
        except Exception as exc:  # a stream closing as we speak
            log.debug("could not queue a control message: %s", exc)

    def to_stream(self, sid: int, control: c4_pb2.Control) -> bool:
        """Send ``control`` down stream ``sid``; False if it has closed."""
        with self._lock:
            st = self._streams.get(sid)
        if st is not None:
            self._send(st.push, control)
        return st is not None

    def to_job(self, job: str, attempt: int, control: c4_pb2.Control) -> int:
        """Send ``control`` down every stream carrying the job; returns how many."""
        with self._lock:
            pushes = [st.push for st in self._streams.values() if (job, attempt) in st.jobs]
        for push in pushes:
            self._send(push, control)
        return len(pushes)

    # -- schedules ------------------------------------------------------------------------
    def publish(self, schedule: c4_pb2.SampleSchedule) -> int:
        """Make ``schedule`` the job's and send it down every stream carrying the job; returns
        how many streams got it."""
        job = (schedule.job, schedule.attempt)
        with self._lock:
            self._schedules[job] = schedule
            if not any(job in st.jobs for st in self._streams.values()):
                self._idle_now(job)
        return self.to_job(schedule.job, schedule.attempt, c4_pb2.Control(schedule=schedule))

    def _idle_now(self, job: JobKey) -> None:
        """(Under the lock) no open stream carries ``job`` now: its schedule is kept among
        the newest ``MAX_IDLE_SCHEDULES`` of such jobs'."""
        if job not in self._schedules:
            return
        self._idle[job] = None
        self._idle.move_to_end(job)
        while len(self._idle) > MAX_IDLE_SCHEDULES:
            old, _ = self._idle.popitem(last=False)
            self._schedules.pop(old, None)

    def schedule(self, job: str, attempt: int) -> c4_pb2.SampleSchedule | None:
        with self._lock:
            return self._schedules.get((job, attempt))

    def forget(self, job: str, attempt: int) -> None:
        with self._lock:
            self._schedules.pop((job, attempt), None)
            self._idle.pop((job, attempt), None)

    # -- detail -----------------------------------------------------------------------------
    def request_detail(self, req: c4_pb2.DetailRequest, hosts: Iterable[str]) -> set[str]:
        """Send ``req`` to the streams of ``hosts`` that carry its job; returns the hosts
        asked (their answers are then expected)."""
        wanted = set(hosts)
        job = (req.job, req.attempt)
        with self._lock:
            targets = [(st.push, st.hosts & wanted) for st in self._streams.values()
                       if job in st.jobs and st.hosts & wanted]
            asked = set().union(*(h for _, h in targets)) if targets else set()
            if asked:
                self._expected[req.request] = set(asked)
                while len(self._expected) > MAX_REQUESTS:
                    self._expected.popitem(last=False)
        for push, _ in targets:
            self._send(push, c4_pb2.Control(detail=req))
        return asked

    def request_inspect(self, req: c4_pb2.InspectRequest) -> bool:
        """Ask the sidecar of ``req.host`` that carries the job to inspect a rank's process;
        whether one was asked (its answer is then expected)."""
        job = (req.job, req.attempt)
        with self._lock:
            pushes = [st.push for st in self._streams.values()
                      if job in st.jobs and req.host in st.hosts]
            if pushes:
                self._expected[req.request] = {req.host}
                while len(self._expected) > MAX_REQUESTS:
                    self._expected.popitem(last=False)
        for push in pushes[:1]:
            self._send(push, c4_pb2.Control(inspect=req))
        return bool(pushes)

    def expected(self, request: int) -> bool:
        """Whether detail request ``request`` was sent (lately): its answers are taken, each
        once per stream asked (a resend of one too: the store keeps it once)."""
        with self._lock:
            return request in self._expected

    def streams(self) -> int:
        with self._lock:
            return len(self._streams)
