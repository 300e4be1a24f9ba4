"""A whole trace file read into memory: its calls, connection samples and rank placement, for
the views that draw a job (``c4 report --html``, ``c4 analyze --chrome-trace``) rather than
stream it through the detectors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diagnosis.engine import ConnRecords
from diagnosis.trace.reader import End, Meta, RankInfo, read_trace
from proto.codec import OP_COLUMNS, Columns, concat, empty_columns


@dataclass
class TraceJob:
    ops: Columns
    conns: list[ConnRecords] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)   # rank -> host
    gpus: dict[int, str] = field(default_factory=dict)
    nics: dict[int, str] = field(default_factory=dict)
    job: str | None = None
    end_ns: int | None = None          # the trace's end record: when recording stopped


def read_job(path: str | Path) -> TraceJob:
    """Every op record, conn record and rank record of the trace at ``path``."""
    parts: list[Columns] = []
    out = TraceJob(empty_columns(OP_COLUMNS))
    for item in read_trace(path):
        if isinstance(item, Columns):
            parts.append(item)
        elif isinstance(item, ConnRecords):
            out.conns.append(item)
        elif isinstance(item, RankInfo):
            out.hosts[item.rank] = item.host
            if item.gpu:
                out.gpus[item.rank] = item.gpu
            if item.nic:
                out.nics[item.rank] = item.nic
        elif isinstance(item, Meta):
            out.job = item.job
        elif isinstance(item, End):
            out.end_ns = item.t_ns
    if parts:
        out.ops = concat(parts)
    return out
