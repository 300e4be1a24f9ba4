"""``c4 export``: a job's stored telemetry as a trace file (shared formats, section 2).

A job that always shipped every call, and no socket samples, exports as version 1. A job whose
calls were sampled (its sampling schedules are stored) or that sent reduced records exports as
version 2:
``meta.sample`` is the largest factor its schedule ever set, and its op records are the calls
that factor keeps plus every row not ok (the rule the edge applies, ``c4.reduce``), so
the calls stored in full before the factor rose are thinned to it: a version 2 trace has one
factor for its whole length. Then the ``progress``, ``linkstat`` (peers named from the socket
endpoints every node reported, as the daemon does live) and ``port`` records as stored.

``full``: the full records the nodes sent around the job's fault reports (detail on demand)
are merged into the op records, once per call, so the trace holds every call of the ranks
involved around each report's onset.

A job whose telemetry was full shipped raw socket samples instead of ``linkstat`` records; they
are written as the linkstat windows its sidecar would have made of them in reduced mode (so
version 2): their retransmission counts are the only evidence of a lossy link.

Rows ``c4 analyze`` could not use (times before the epoch or far in the future, integers near
the int64 limits: stored before the daemon checked times at the door) are left out, counted
(``ExportSummary.insane``) and named in a warning: an export never writes what analyze cannot
read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import (
    Columns,
    concat,
    decode_conns,
    decode_linkstats,
    decode_ops,
    decode_ports,
    decode_progress,
)
from c4.proto.health import HealthRecord
from c4.reduce import DEFAULT_WINDOW_NS, kept_rows
from c4.reduce.links import sample_windows
from c4.reduce.sampling import take
from diagnosis.daemon.batches import port_records, progress_records
from diagnosis.daemon.bounds import sane_rows
from diagnosis.daemon.linkstats import LinkStatResolver
from diagnosis.engine.records import LinkStatRecords
from diagnosis.trace.writer import TraceWriter

log = logging.getLogger(__name__)


@dataclass
class ExportSummary:
    lines: int = 0
    version: int = 1
    sample: int = 1
    ops: int = 0
    progress: int = 0
    linkstat: int = 0
    port: int = 0
    detail_ops: int = 0
    unresolved_links: int = 0
    insane: int = 0          # rows left out: their times or values are beyond what c4 reads


def _sane(cols: Columns, kind: str, summary: ExportSummary, now_ns: int) -> Columns:
    keep = sane_rows(cols, kind, now_ns=now_ns)
    if keep.all():
        return cols
    summary.insane += int((~keep).sum())
    return take(cols, keep)


def _sample(schedules: list[c4_pb2.SampleSchedule]) -> int:
    return max([1, *(s.sample for msg in schedules for s in msg.steps),
                *(msg.default_sample for msg in schedules)])


def _merge_detail(ops: Columns, details: list[c4_pb2.DetailBatch]) -> tuple[Columns, int]:
    """``ops`` plus the detail rows of calls not in it (a completed row wins)."""
    parts = [decode_ops(d.ops) for d in details if d.ops.count]
    if not parts:
        return ops, 0
    both = concat([ops, *parts]) if len(ops) else concat(parts)
    names = np.asarray(both.strings, dtype=object)
    keys = list(zip(both["rank"].tolist(), names[both["pg"]].tolist(),
                    names[both["op"]].tolist(), both["peer"].tolist(), both["seq"].tolist(),
                    strict=True))
    end = both["t_end_ns"].tolist()
    best: dict[tuple, int] = {}
    for i, k in enumerate(keys):
        j = best.get(k)
        if j is None or (end[j] < 0 <= end[i]):
            best[k] = i
    rows = np.asarray(sorted(best.values(), key=lambda i: (both["t_enter_ns"][i], keys[i][0])),
                      dtype=np.int64)
    mask = np.zeros(len(both), dtype=bool)
    mask[rows] = True
    merged = take(both, mask)
    return merged, len(merged) - len(ops)


def _links(chunks: list[Columns], summary: ExportSummary) -> LinkStatRecords | None:
    """Every stored linkstat row with its peer named from all nodes' endpoints."""
    if not chunks:
        return None
    resolver = LinkStatResolver(hold_s=float("inf"))
    for c in chunks:                    # learn every owner before resolving any row
        names = np.asarray(c.strings, dtype=object)
        resolver.learn(c["src"], names[c["local"]].tolist())
    recs = resolver.add(concat(chunks) if len(chunks) > 1 else chunks[0], now=0.0)
    summary.unresolved_links = resolver.waiting()
    return recs


def write_trace(output: str | Path, job: str, *, ranks: list[c4_pb2.RankInfo],
                groups: list[c4_pb2.GroupSummary], ops: Columns,
                reduced: list[c4_pb2.ReducedChunk],
                details: list[c4_pb2.DetailBatch] | None = None,
                stopped_ns: int = 0) -> ExportSummary:
    """Write the trace of a job from what the daemon returns for it. ``stopped_ns``: when the
    recording stopped (the job's end, or now for a job still running); the ``end`` record is
    the later of it and the last record, so that calls still open then are judged as hangs
    of that length, not of none."""
    out = ExportSummary()
    by_kind: dict[str, list] = {"progress": [], "linkstats": [], "ports": [], "schedule": [],
                                "conns": [], "health": []}
    for chunk in reduced:
        by_kind[chunk.WhichOneof("body")].append(getattr(chunk, chunk.WhichOneof("body")))
    out.sample = _sample(by_kind["schedule"])
    linkstats = [decode_linkstats(m) for m in by_kind["linkstats"]]
    if by_kind["conns"]:
        windows = sample_windows(concat([decode_conns(m) for m in by_kind["conns"]]),
                                 DEFAULT_WINDOW_NS)
        if windows is not None:
            linkstats.append(windows)
    reduced_kinds = bool(linkstats) or any(by_kind[k] for k in ("progress", "ports", "health"))
    out.version = 2 if out.sample > 1 or reduced_kinds else 1
    if out.sample > 1 and len(ops):
        ops = take(ops, kept_rows(ops, out.sample))
    if details:
        ops, out.detail_ops = _merge_detail(ops, details)
    now_ns = time.time_ns()
    ops = _sane(ops, "OpBatch", out, now_ns)
    out.ops = len(ops)
    progress = [_sane(decode_progress(m), "ProgressBatch", out, now_ns)
                for m in by_kind["progress"]]
    links = _links([_sane(w, "LinkStatBatch", out, now_ns) for w in linkstats], out)
    ports = [_sane(decode_ports(m), "PortBatch", out, now_ns) for m in by_kind["ports"]]
    ends = [int(max(ops["t_enter_ns"].max(), ops["t_end_ns"].max()))] if len(ops) else []
    with TraceWriter(output) as w:
        w.meta(job, version=out.version, sample=out.sample)
        for r in ranks:
            w.rank(r.rank, r.host, r.gpu or None, r.nic or None)
        for g in groups:
            w.group(g.pg, list(g.ranks))
        w.ops(ops)
        for p in progress:
            w.progress_records(progress_records(p))
            out.progress += len(p)
            ends.append(int(p["t_ns"].max()))
        if links is not None and len(links):
            w.linkstat_records(links)
            out.linkstat = len(links)
            ends.append(int(links.t_ns.max()))
        for p in ports:
            w.port_records(port_records(p))
            out.port += len(p)
            ends.append(int(p["t_ns"].max()))
        for batch in by_kind["health"]:
            for sample in batch.samples:
                w.health(HealthRecord.from_proto(sample))
                ends.append(int(sample.t_ns))
        if ends or stopped_ns:
            w.end(max([*ends, stopped_ns]))
        out.lines = w.lines
    if out.unresolved_links:
        log.warning("%d linkstat rows name a peer socket no node reported: left out",
                    out.unresolved_links)
    if out.insane:
        log.warning("%d rows hold times before the epoch or far ahead, or integers near the "
                    "int64 limits (stored before the daemon checked them): left out, c4 "
                    "analyze could not use them", out.insane)
    return out
