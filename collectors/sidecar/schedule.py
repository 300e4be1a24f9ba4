"""A job's sampling schedule as the daemon announces it (``SampleSchedule``), and the op rows
it keeps.

Per communicator, steps "from seq S on, factor K": a call ``(pg, seq)`` is kept when
``proto.sampling`` keeps it at the factor in force at ``seq``. The rule is a function of the call
alone, so every member of a communicator keeps the same calls, whichever sidecar it reports to
and whenever its rows arrive, provided the step reached the sidecar before the rows of seq S did
(the daemon announces S a few seconds of calls ahead; a step that arrives late is counted and
mended from the detail ring, see :mod:`collectors.sidecar.edge`). Factors are powers of two, so
the calls kept at 2K are a subset of those kept at K. A communicator without steps keeps every
call.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from collectors.reduce.keys import group_starts
from proto import c4_pb2
from proto.codec import Columns


@dataclass(frozen=True)
class Schedule:
    """One version of a job's schedule: per communicator, ``(from_seq, factor)`` steps in seq
    order; windows of ``window_ns`` from ``window_from_ns`` on (0: the sidecar's default)."""

    version: int = 0
    steps: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    window_ns: int = 0
    window_from_ns: int = 0

    @classmethod
    def from_proto(cls, msg: c4_pb2.SampleSchedule) -> Schedule:
        steps: dict[str, list[tuple[int, int]]] = {}
        for s in msg.steps:
            if s.sample < 1:
                raise ValueError(f"schedule step of {s.pg!r} has factor {s.sample}; factors are "
                                 ">= 1")
            steps.setdefault(s.pg, []).append((int(s.from_seq), int(s.sample)))
        return cls(int(msg.version), {pg: tuple(sorted(v)) for pg, v in steps.items()},
                   int(msg.window_ns), int(msg.window_from_ns))

    def to_proto(self, job: str, attempt: int) -> c4_pb2.SampleSchedule:
        return c4_pb2.SampleSchedule(
            job=job, attempt=attempt, version=self.version, window_ns=self.window_ns,
            window_from_ns=self.window_from_ns,
            steps=[c4_pb2.SampleStep(pg=pg, from_seq=s, sample=k)
                   for pg, steps in sorted(self.steps.items()) for s, k in steps])

    @property
    def max_sample(self) -> int:
        """The largest factor in force or announced: above 1, the job ships reduced."""
        return max((k for steps in self.steps.values() for _, k in steps), default=1)

    def factor(self, pg: str, seq: int) -> int:
        """The factor in force at call ``seq`` of ``pg``."""
        steps = self.steps.get(pg)
        if not steps:
            return 1
        i = bisect.bisect_right(steps, (int(seq), 1 << 62)) - 1
        return steps[i][1] if i >= 0 else 1

    def kept(self, ops: Columns) -> np.ndarray:
        """Mask of the rows whose call this schedule keeps (status and openness aside)."""
        return kept_by(ops, self.factor)


def kept_by(ops: Columns, factor: Callable[[str, int], int]) -> np.ndarray:
    """Mask of the rows whose call ``(pg, seq)`` is kept at ``factor(pg, seq)``: each distinct
    call is judged once (a node's ranks share most calls)."""
    n = len(ops)
    if not n:
        return np.zeros(0, dtype=bool)
    pg = np.asarray(ops["pg"], dtype=np.int64)
    seq = np.asarray(ops["seq"], dtype=np.int64)
    order, first = group_starts(pg, seq)
    starts = order[first]
    names = np.asarray(ops.strings, dtype=object)[pg[starts]].tolist()
    crc = zlib.crc32
    keep_call = np.fromiter(
        ((k := factor(p, s)) <= 1 or crc(f"{p}:{s}".encode()) % k == 0
         for p, s in zip(names, seq[starts].tolist(), strict=True)),
        dtype=bool, count=len(starts))
    keep = np.empty(n, dtype=bool)
    keep[order] = keep_call[np.cumsum(first) - 1]
    return keep
