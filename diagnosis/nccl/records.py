"""The records NCCL's sources are read into, before they become c4's.

:class:`NcclOps` holds operations as columns, whatever source they come from (the Inspector,
the example profiler's trace, CoMMA, the older per-operation Prometheus lines): per row the
process (hostname, pid) and communicator (hash, rank in it) as the source names them, NCCL's
own numbering, sizes and times in µs. :mod:`diagnosis.nccl.convert` turns them into c4's op
rows once the job is reconciled (:mod:`diagnosis.nccl.job`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

__all__ = ["CommKey", "DumpStats", "NcclOps", "OpRecord"]

_NONE = -1


@dataclass(frozen=True)
class CommKey:
    """A communicator as one process sees it: hash, its rank in it, the size and node count,
    and the name NCCL 2.30+ prints (None when absent or ``"unknown"``)."""

    hash: int
    rank: int
    nranks: int
    nnodes: int = 0
    name: str | None = None


@dataclass(frozen=True)
class OpRecord:
    """One operation as a reader understands it (the slow path, tests): the fields of an
    Inspector line, and what other sources map onto them.

    ``op`` is the trace format's name (``all_reduce``, ``send``), ``func`` NCCL's
    (``AllReduce``); ``sn`` is NCCL's per-collective-type counter (0-based, ``coll_sn``) or the
    Inspector's per-communicator point-to-point counter (1-based, ``p2p_sn``); ``peer`` the
    peer's rank in the communicator (-1 for collectives). Times are µs; None when not written.
    """

    source: str
    line: int
    comm: CommKey
    hostname: str
    pid: int
    version: str
    dump_us: int
    op: str
    func: str
    sn: int
    peer: int
    msg_bytes: int
    exec_us: int | None
    timing: str | None
    algobw_gbs: float
    busbw_gbs: float
    start_us: int | None = None
    kernel_start_us: int | None = None
    kernel_stop_us: int | None = None

    @property
    def p2p(self) -> bool:
        return self.peer >= 0


@dataclass(frozen=True)
class DumpStats:
    """A ``dump_stats`` marker (unmerged v4.1+): what the dump held and what the rings lost."""

    source: str
    line: int
    hostname: str
    pid: int
    dump_us: int
    dropped: int
    values: dict[str, Any] = field(default_factory=dict)


_INT_COLS = ("sn", "peer", "msg_bytes", "exec_us", "dump_us", "start_us", "kstart_us",
             "kstop_us", "line")

_K = TypeVar("_K")


def _renumber(table: dict[_K, int], own: list[_K], index: np.ndarray) -> np.ndarray:
    """A batch's index into its own table ``own`` as an index into the merged ``table``
    (entries it did not have are added)."""
    remap = np.asarray([table.setdefault(x, len(table)) for x in own] or [0], dtype=np.int32)
    return remap[index]


@dataclass
class NcclOps:
    """Records of one block of one file, as columns. ``proc`` indexes ``procs`` ((hostname,
    pid)), ``comm`` indexes ``comms`` and ``op`` indexes ``ops``; integer columns are -1 where
    the line has no value; ``busbw`` is NaN where NCCL wrote ``"nan"``."""

    source: str
    procs: list[tuple[str, int]]
    comms: list[CommKey]
    ops: list[str]
    proc: np.ndarray
    comm: np.ndarray
    op: np.ndarray
    sn: np.ndarray
    peer: np.ndarray
    msg_bytes: np.ndarray
    exec_us: np.ndarray
    dump_us: np.ndarray
    start_us: np.ndarray
    kstart_us: np.ndarray
    kstop_us: np.ndarray
    line: np.ndarray
    busbw: np.ndarray
    #: records the Inspector's rings dropped (``dump_stats`` markers of v4.1+), and the markers
    dropped: int = 0
    stats: list[DumpStats] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sn)

    @property
    def end_us(self) -> np.ndarray:
        """When each operation ended: the kernel's stop (verbose output), else the dump time."""
        return np.where(self.kstop_us > 0, self.kstop_us, self.dump_us)

    @property
    def enter_us(self) -> np.ndarray:
        """When the rank arrived: the end minus the GPU-timed execution; without an execution
        time, the first kernel start, then the enqueue time, then the end."""
        end = self.end_us
        fallback = np.where(self.kstart_us > 0, self.kstart_us,
                            np.where(self.start_us > 0, self.start_us, end))
        return np.where(self.exec_us >= 0, end - self.exec_us, np.minimum(fallback, end))

    @classmethod
    def empty(cls, source: str = "") -> NcclOps:
        return cls.from_records([], source)

    @classmethod
    def from_records(cls, recs: Iterable[OpRecord], source: str,
                     stats: Iterable[DumpStats] = ()) -> NcclOps:
        """Columns from parsed records (the slow path and tests)."""
        recs = list(recs)
        procs: dict[tuple[str, int], int] = {}
        comms: dict[CommKey, int] = {}
        ops: dict[str, int] = {}
        proc = [procs.setdefault((r.hostname, r.pid), len(procs)) for r in recs]
        comm = [comms.setdefault(r.comm, len(comms)) for r in recs]
        op = [ops.setdefault(r.op, len(ops)) for r in recs]

        def col(values: list[int | None]) -> np.ndarray:
            return np.asarray([_NONE if v is None else v for v in values], dtype=np.int64)

        st = list(stats)
        return cls(
            source, list(procs), list(comms), list(ops),
            proc=np.asarray(proc, dtype=np.int32), comm=np.asarray(comm, dtype=np.int32),
            op=np.asarray(op, dtype=np.int32),
            sn=col([r.sn for r in recs]), peer=col([r.peer for r in recs]),
            msg_bytes=col([r.msg_bytes for r in recs]), exec_us=col([r.exec_us for r in recs]),
            dump_us=col([r.dump_us for r in recs]), start_us=col([r.start_us for r in recs]),
            kstart_us=col([r.kernel_start_us for r in recs]),
            kstop_us=col([r.kernel_stop_us for r in recs]), line=col([r.line for r in recs]),
            busbw=np.asarray([r.busbw_gbs for r in recs], dtype=np.float64),
            dropped=sum(s.dropped for s in st), stats=st)

    def in_line_order(self) -> NcclOps:
        """The rows sorted by line (rows of two paths joined)."""
        if len(self) < 2 or (np.diff(self.line) >= 0).all():
            return self
        o = np.argsort(self.line, kind="stable")
        for name in ("proc", "comm", "op", *_INT_COLS, "busbw"):
            setattr(self, name, getattr(self, name)[o])
        return self

    def records(self) -> list[OpRecord]:
        """The rows as records (tests, small files); bandwidths other than bus are not kept."""
        out = []
        for i in range(len(self)):
            opt = {k: (None if int(getattr(self, c)[i]) < 0 else int(getattr(self, c)[i]))
                   for k, c in (("exec_us", "exec_us"), ("start_us", "start_us"),
                                ("kernel_start_us", "kstart_us"),
                                ("kernel_stop_us", "kstop_us"))}
            host, pid = self.procs[int(self.proc[i])]
            op = self.ops[int(self.op[i])]
            out.append(OpRecord(
                self.source, int(self.line[i]), self.comms[int(self.comm[i])], host, pid, "",
                int(self.dump_us[i]), op, "", int(self.sn[i]), int(self.peer[i]),
                int(self.msg_bytes[i]), opt["exec_us"], None, math.nan,
                float(self.busbw[i]), opt["start_us"], opt["kernel_start_us"],
                opt["kernel_stop_us"]))
        return out

    @staticmethod
    def concat(parts: list[NcclOps], source: str = "") -> NcclOps:
        """One batch of several (tables merged)."""
        parts = [p for p in parts if len(p) or p.stats]
        if not parts:
            return NcclOps.empty(source)
        if len(parts) == 1:
            return parts[0]
        procs: dict[tuple[str, int], int] = {}
        comms: dict[CommKey, int] = {}
        ops: dict[str, int] = {}
        cols: dict[str, list[np.ndarray]] = {c: [] for c in ("proc", "comm", "op")}
        for p in parts:
            cols["proc"].append(_renumber(procs, p.procs, p.proc))
            cols["comm"].append(_renumber(comms, p.comms, p.comm))
            cols["op"].append(_renumber(ops, p.ops, p.op))
        arrays = {c: np.concatenate(cols[c]) for c in cols}
        arrays.update({c: np.concatenate([getattr(p, c) for p in parts]) for c in _INT_COLS})
        out = NcclOps(
            source or parts[0].source, list(procs), list(comms), list(ops), **arrays,
            busbw=np.concatenate([p.busbw for p in parts]),
            dropped=sum(p.dropped for p in parts), stats=[s for p in parts for s in p.stats])
        return out


