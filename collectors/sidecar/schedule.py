"""A job's sampling schedule as the daemon announces it (``SampleSchedule``), and the op rows
it keeps.

Per communicator, steps "from seq S on, factor K": a call ``(pg, seq)`` is kept when
``c4.proto.sampling`` keeps it at the factor in force at ``seq``. The rule is a function of the call
alone, so every member of a communicator keeps the same calls, whichever sidecar it reports to
and whenever its rows arrive, provided the step reached the sidecar before the rows of seq S did
(the daemon announces S a few seconds of calls ahead; a step that arrives late is counted and
mended from the detail ring, see :mod:`collectors.sidecar.edge`). Factors are powers of two, so
the calls kept at 2K are a subset of those kept at K. Before its first step, and without steps,
a communicator keeps the calls of the job's default factor (set once, when the job starts).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import Columns
from c4.proto.sampling import sampled_seqs


@dataclass(frozen=True)
class Schedule:
    """One version of a job's schedule: per communicator, ``(from_seq, factor)`` steps in seq
    order; windows of ``window_ns`` from ``window_from_ns`` on (0: the sidecar's default)."""

    version: int = 0
    steps: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    window_ns: int = 0
    window_from_ns: int = 0
    default: int = 1

    @classmethod
    def from_proto(cls, msg: c4_pb2.SampleSchedule) -> Schedule:
        steps: dict[str, list[tuple[int, int]]] = {}
        for s in msg.steps:
            if s.sample < 1:
                raise ValueError(f"schedule step of {s.pg!r} has factor {s.sample}; factors are "
                                 ">= 1")
            steps.setdefault(s.pg, []).append((int(s.from_seq), int(s.sample)))
        return cls(int(msg.version), {pg: tuple(sorted(v)) for pg, v in steps.items()},
                   int(msg.window_ns), int(msg.window_from_ns), max(1, int(msg.default_sample)))

    def to_proto(self, job: str, attempt: int) -> c4_pb2.SampleSchedule:
        return c4_pb2.SampleSchedule(
            job=job, attempt=attempt, version=self.version, window_ns=self.window_ns,
            window_from_ns=self.window_from_ns, default_sample=self.default,
            steps=[c4_pb2.SampleStep(pg=pg, from_seq=s, sample=k)
                   for pg, steps in sorted(self.steps.items()) for s, k in steps])

    @property
    def max_sample(self) -> int:
        """The largest factor in force or announced: above 1, the job ships reduced."""
        return max([self.default, *(k for steps in self.steps.values() for _, k in steps)])

    def factor(self, pg: str, seq: int) -> int:
        """The factor in force at call ``seq`` of ``pg``."""
        steps = self.steps.get(pg)
        if not steps:
            return self.default
        i = bisect.bisect_right(steps, (int(seq), 1 << 62)) - 1
        return steps[i][1] if i >= 0 else self.default

    def kept(self, ops: Columns) -> np.ndarray:
        """Mask of the rows whose call this schedule keeps (status and openness aside)."""
        n = len(ops)
        keep = np.ones(n, dtype=bool)
        if not n or (not self.steps and self.default <= 1):
            return keep
        pg = np.asarray(ops["pg"])
        seq = np.asarray(ops["seq"], dtype=np.int64)
        for i, name in enumerate(ops.strings):
            steps = self.steps.get(name, ())
            if not steps and self.default <= 1:
                continue
            rows = np.flatnonzero((pg == i) & (seq >= 0))
            if not len(rows):
                continue
            s = seq[rows]
            starts = np.fromiter((a for a, _ in steps), dtype=np.int64, count=len(steps))
            factors = np.fromiter((k for _, k in steps), dtype=np.int64, count=len(steps))
            at = np.searchsorted(starts, s, side="right") - 1
            k_row = np.where(at >= 0, factors[np.maximum(at, 0)], self.default) if len(steps) \
                else np.full(len(rows), self.default, dtype=np.int64)
            out = np.ones(len(rows), dtype=bool)
            for k in np.unique(k_row[k_row > 1]).tolist():
                m = k_row == k
                out[m] = sampled_seqs(name, s[m], k)
            keep[rows] = out
        return keep
