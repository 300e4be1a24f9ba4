"""Offline diagnosis of a job from NCCL's telemetry: the sources read, the job reconciled, every
record fed to the same :class:`~diagnosis.engine.Engine` as a c4 trace, in time order.

``analyze_nccl(sources)`` (``c4 analyze --nccl-inspector DIR --ncclras FILE --logs FILE…``):

1. the job: who is who (:mod:`~diagnosis.nccl.job`, :mod:`~diagnosis.nccl.observe`), the ranks
   placed on the topology (:mod:`~diagnosis.nccl.placement`), the communicators as groups;
2. each file's operations in file order through :class:`~diagnosis.nccl.convert.OpConverter`
   (per-communicator sequence numbers, global ranks), then all of them by completion time;
3. RAS reports at their times (:mod:`~diagnosis.nccl.ras_progress`): the calls ranks are
   inside, and failed rows for the ranks RAS lost;
4. the engine advanced every second of data; recording is taken to have stopped at the last
   record (or ``stopped_after_ns`` after it);
5. what logs and text RAS reports say that the engine cannot see
   (:mod:`~diagnosis.nccl.findings`), added where no engine report names the same culprit.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from c4.proto.codec import Columns, concat
from c4.report import FaultReport
from c4.topology.protocol import TopologyLike
from diagnosis.engine import Engine
from diagnosis.engine.config import EngineConfig
from diagnosis.nccl.convert import OpConverter
from diagnosis.nccl.findings import findings, merge
from diagnosis.nccl.job import JobModel, Resolved
from diagnosis.nccl.observe import observe_logs, observe_ops, observe_ras
from diagnosis.nccl.placement import place_ranks
from diagnosis.nccl.ras_progress import RasFeed, RasRows
from diagnosis.nccl.sources import NcclSources

log = logging.getLogger(__name__)

__all__ = ["NcclStats", "analyze_nccl", "resolve_job"]

STEP_NS = 1_000_000_000


@dataclass
class NcclStats:
    """What the analysis read and used."""

    files: dict[str, int] = field(default_factory=dict)
    ops_read: int = 0
    ops_used: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    progress: int = 0
    failed_rows: int = 0
    inferred_p2p: int = 0
    ras_reports: int = 0
    ranks: int = 0
    groups: int = 0
    incomplete_groups: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    end_ns: int | None = None


def resolve_job(sources: NcclSources, topology: TopologyLike | None = None) -> Resolved:
    """The reconciled job of everything the sources say."""
    model = JobModel()
    for ops in sources.ops:
        observe_ops(model, ops)
    observe_ras(model, sources.ras)
    observe_logs(model, sources.logs)
    return model.resolve(topology.hosts() if topology is not None else None)


def analyze_nccl(sources: NcclSources, topology: TopologyLike | None = None,
                 config: EngineConfig | None = None, stopped_after_ns: int | None = None,
                 engine: Engine | None = None) -> tuple[list[FaultReport], NcclStats]:
    """Fault reports for a job's NCCL telemetry, and what was read."""
    resolved = resolve_job(sources, topology)
    eng = engine if engine is not None else Engine(topology, config)
    for rank, (host, gpu, nic) in sorted(place_ranks(resolved, topology).items()):
        eng.add_rank(rank, host, gpu, nic)
    for pg, ranks in resolved.groups.items():
        eng.add_group(pg, ranks)
    conv = OpConverter(resolved)
    batches = [c for c in (conv.convert(ops) for ops in sources.ops) if c is not None]
    ops = _by_completion(batches)
    feed = RasFeed(resolved, conv.frontiers, sources.problems, conv.history)
    snaps = sorted((s for s in sources.ras if s.format == "json" or s.comms),
                   key=lambda s: s.t_ns or 0)
    ras_rows = [r for r in (feed.rows(s) for s in snaps) if r is not None]
    stats = NcclStats(files=dict(sources.files), ops_read=sources.n_ops, ops_used=conv.rows,
                      dropped=dict(conv.dropped), ras_reports=len(ras_rows),
                      ranks=len(resolved.rank_of), groups=len(resolved.groups),
                      incomplete_groups=len(resolved.incomplete))
    last = _feed(eng, ops, ras_rows, stats)
    if last is None:
        log.warning("no record c4 can use: check that the files are of one job and that "
                    "every node's files were given")
    end = None
    if last is not None:
        end = last + (stopped_after_ns or 0)
    stats.end_ns = end
    eng.finish(end)
    # every incident, as for a c4 trace: the open faults and those that cleared (a stall the
    # job came out of is still what a post-mortem looks for)
    reports = eng.incidents()
    extra = findings(sources, resolved, topology, eng)
    stats.problems = sources.problems.summary()
    return merge(reports, extra), stats


def _by_completion(batches: list[Columns]) -> Columns | None:
    if not batches:
        return None
    cols = concat(batches)
    end = cols.columns["t_end_ns"]
    order = np.argsort(np.where(end >= 0, end, cols.columns["t_enter_ns"]), kind="stable")
    return Columns({k: v[order] for k, v in cols.columns.items()}, cols.strings,
                   {int(np.flatnonzero(order == i)[0]): t for i, t in cols.error_text.items()})


def _take(cols: Columns, a: int, b: int) -> Columns:
    return Columns({k: v[a:b] for k, v in cols.columns.items()}, cols.strings)


def _feed(eng: Engine, ops: Columns | None, ras: list[RasRows], stats: NcclStats) -> int | None:
    """Everything to the engine in time order, advancing it every second; returns the time of
    the last record."""
    times = []
    vis = np.zeros(0, dtype=np.int64)
    if ops is not None and len(ops):
        end = ops.columns["t_end_ns"]
        vis = np.where(end >= 0, end, ops.columns["t_enter_ns"])
        times += [int(vis[0]), int(vis[-1])]
    times += [r.t_ns for r in ras]
    if not times:
        return None
    t0, t1 = min(times), max(times)
    pos = 0
    ri = 0
    w = t0 + STEP_NS
    while True:
        cut = min(w, t1)
        while ri < len(ras) and ras[ri].t_ns <= cut:
            pos = _ops_upto(eng, ops, vis, pos, ras[ri].t_ns)
            _ras(eng, ras[ri], stats)
            ri += 1
        pos = _ops_upto(eng, ops, vis, pos, cut)
        eng.advance(cut)
        if cut >= t1:
            break
        w += STEP_NS
    return t1


def _ops_upto(eng: Engine, ops: Columns | None, vis: np.ndarray, pos: int, t: int) -> int:
    if ops is None:
        return pos
    stop = int(np.searchsorted(vis, t, side="right"))
    if stop > pos:
        eng.add_ops(_take(ops, pos, stop))
    return stop


def _ras(eng: Engine, rows: RasRows, stats: NcclStats) -> None:
    if rows.progress is not None and len(rows.progress):
        eng.add_progress(rows.progress, fill_open=True)
        stats.progress += len(rows.progress)
    if rows.errors is not None and len(rows.errors):
        eng.add_ops(rows.errors)
        stats.failed_rows += len(rows.errors)
    if rows.open_p2p is not None and len(rows.open_p2p):
        eng.add_ops(rows.open_p2p)
        stats.inferred_p2p += len(rows.open_p2p)


def dropped_summary(stats: NcclStats) -> str:
    c = Counter(stats.dropped)
    return ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in c.most_common())
