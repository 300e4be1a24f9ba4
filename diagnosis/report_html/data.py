"""What the HTML report draws, gathered from a daemon or from a trace file: ops, transfer
samples, rank placement and fault reports; the recovery timelines (``recoveries``) are filled
in by whoever reads the recovery journal (``recovery.marks``), since diagnosis sits below
recovery."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from c4.proto.codec import Columns
from c4.report import FaultReport
from diagnosis.errors import DiagnosisError

if TYPE_CHECKING:
    from c4.topology import Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryMarks:
    """One recovery from the journal: its node, final state and the phases' wall-clock times."""

    id: int
    node: str
    state: str
    at: dict[str, int]


@dataclass
class Transfers:
    """Point-to-point transfers, one row each: who sent to whom, how many bytes, how long."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    seconds: np.ndarray
    source: str  # "conn samples" or "point-to-point op durations"


@dataclass
class ReportData:
    job: str
    origin: str                              # "daemon HOST:PORT" or "trace FILE"
    ops: Columns
    transfers: Transfers | None
    faults: list[FaultReport]
    hosts: dict[int, str] = field(default_factory=dict)    # rank -> host
    gpus: dict[int, str] = field(default_factory=dict)
    nics: dict[int, str] = field(default_factory=dict)
    topology: Topology | None = None   # drawn from its graph, so the networkx model
    recoveries: list[RecoveryMarks] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def transfers_from_ops(ops: Columns) -> Transfers | None:
    """Transfers from completed point-to-point calls: a send at rank r to peer p is r -> p, a
    recv at r from p is p -> r; the duration is the call's (start, else enter) to its end."""
    if not len(ops):
        return None
    names = np.asarray(ops.strings, dtype=object)
    op = names[ops["op"]] if len(names) else np.empty(0, dtype=object)
    done = (ops["peer"] >= 0) & (ops["t_end_ns"] >= 0)
    is_send = done & np.isin(op, ("send", "isend"))
    is_recv = done & np.isin(op, ("recv", "irecv"))
    keep = is_send | is_recv
    if not keep.any():
        return None
    rank, peer = ops["rank"][keep].astype(np.int64), ops["peer"][keep].astype(np.int64)
    send = is_send[keep]
    start = np.where(ops["t_start_ns"] >= 0, ops["t_start_ns"], ops["t_enter_ns"])[keep]
    secs = np.maximum(ops["t_end_ns"][keep] - start, 1) / 1e9
    return Transfers(np.where(send, rank, peer), np.where(send, peer, rank),
                     ops["nbytes"][keep].astype(np.float64), secs,
                     "point-to-point op durations")


def _topology(path: Path | None) -> Topology | None:
    if path is None:
        return None
    from c4.topology import Topology

    return Topology.load(path)


def from_daemon(job: str, address: str | None, *, topology: Path | None = None) -> ReportData:
    """Everything the daemon knows about ``job``. The daemon has no query for connection
    samples, so the transfer matrix comes from point-to-point op durations."""
    from diagnosis.client import DaemonClient

    with DaemonClient(address) as client:
        ops = client.ops(job)
        faults = client.faults(job)
        ranks = client.ranks(job)
        where = client.address
    if not len(ops) and not ranks:
        raise DiagnosisError(f"the daemon at {where} knows nothing of job {job!r}: "
                             "`c4 jobs` lists the jobs it has seen")
    data = ReportData(job, f"daemon {where}", ops, transfers_from_ops(ops), faults,
                      hosts={r.rank: r.host for r in ranks},
                      gpus={r.rank: r.gpu for r in ranks if r.gpu},
                      nics={r.rank: r.nic for r in ranks if r.nic},
                      topology=_topology(topology))
    data.notes.append("The daemon offers no query for connection samples, so the transfer "
                      "matrix is derived from the durations of point-to-point calls.")
    return data


class _ReadProgress:
    """Logs how much of the trace is read, every tenth of it: a large trace takes most of the
    report's time here."""

    def __init__(self, path: Path) -> None:
        self.name, self.size = path.name, max(path.stat().st_size, 1)
        self.done, self.next = 0, 0.1

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes          # negative when a shuffled trace is read again, sorted
        if nbytes < 0:
            log.info("%s is not in time order: reading it again, sorted", self.name)
            self.next = 0.1
        elif self.done / self.size >= self.next:
            log.info("read %d%% of %s (%.0f of %.0f MB)", 100 * self.done // self.size,
                     self.name, self.done / 2**20, self.size / 2**20)
            self.next = (int(10 * self.done / self.size) + 1) / 10


def from_trace(path: Path, job: str | None = None, *,
               topology: Path | None = None) -> ReportData:
    """A trace file read offline; its faults are found by running the detectors over it."""
    from diagnosis.engine import Engine
    from diagnosis.trace.feed import feed_trace
    from diagnosis.trace.job import TraceJob
    from diagnosis.trace.parallel import default_workers

    topo = _topology(topology)
    log.info("reading %s and running the detectors over it", Path(path).name)
    tj = TraceJob()
    faults, stats = feed_trace(Engine(topo), path, workers=default_workers(), keep=tj,
                               progress=_ReadProgress(Path(path)))
    ops = tj.ops
    log.info("read %s calls of %s ranks, %d fault report(s)", f"{len(ops):,}",
             f"{len(tj.hosts):,}", len(faults))
    if stats.health:
        from diagnosis.health.diagnose import explain

        faults = explain(list(faults), stats.health, rank_places=stats.places)
    name = job or tj.job or Path(path).stem
    data = ReportData(name, f"trace {Path(path).name}", ops, None, list(faults), tj.hosts,
                      tj.gpus, tj.nics, topo)
    done = [c for c in tj.conns if len(c)]
    if done:
        src = np.concatenate([c.src for c in done])
        dst = np.concatenate([c.dst for c in done])
        nbytes = np.concatenate([c.bytes for c in done]).astype(np.float64)
        t0 = np.concatenate([c.t_start_ns for c in done])
        t1 = np.concatenate([c.t_end_ns for c in done])
        ok = t1 >= 0
        if ok.any():
            data.transfers = Transfers(src[ok], dst[ok], nbytes[ok],
                                       np.maximum(t1[ok] - t0[ok], 1) / 1e9, "conn samples")
    if data.transfers is None:
        data.transfers = transfers_from_ops(ops)
        data.notes.append("The trace holds no finished connection samples, so the transfer "
                          "matrix is derived from the durations of point-to-point calls.")
    return data
