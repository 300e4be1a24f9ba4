"""Builders the engine's tests share: op rows and columns handed to ``Engine.add_ops``, one
collective written for every rank of a lock-step job, the NIC names of single-rank hosts, and
a trace written by a test's scenario then diagnosed from the file, a simulated or synthetic
job written and diagnosed on its own topology, and the sampled-call stragglers of hosts'
tensor-parallel groups fed kept calls directly."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from c4.proto.codec import OP_COLUMNS, Columns
from c4.report import FaultReport
from c4.topology import Topology
from diagnosis.engine import Engine
from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.straggle import SampledStragglers
from diagnosis.engine.timing import GroupTiming
from diagnosis.sim.config import FaultSpec, SimConfig
from diagnosis.sim.run import simulate
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import FeedStats, feed_trace
from diagnosis.trace.synth import SynthJob

OpRow = tuple[int, ...]


def op_row(rank: int, seq: int, enter: int, end: int, *, pg: int = 0, op: int = 1,
           nbytes: int = 1024, dtype: int = 2, start: int = -1, status: int = 0,
           peer: int = -1) -> OpRow:
    """One call in the order of ``OP_COLUMNS``; ``pg``, ``op`` and ``dtype`` index the string
    table given to :func:`op_columns`; ``end`` -1: still open."""
    return (rank, pg, seq, op, nbytes, dtype, enter, start, end, status, peer)


def op_columns(strings: Sequence[str], rows: Sequence[OpRow]) -> Columns:
    """Rows from :func:`op_row` as the columns ``Engine.add_ops`` takes, with their string
    table (the names their ``pg``, ``op`` and ``dtype`` index)."""
    assert all(len(row) == len(OP_COLUMNS) for row in rows), "rows come from op_row"
    arr = {k: np.array([row[i] for row in rows], dtype=dt)
           for i, (k, dt) in enumerate(OP_COLUMNS.items())}
    return Columns(arr, list(strings))


def lockstep(w: TraceWriter, pg: str, seq: int, op: str, nbytes: int, enter: np.ndarray,
             end: float) -> None:
    """One collective of ranks ``0 .. len(enter) - 1``: rank r enters at ``enter[r]``, all
    leave together at ``end`` (the last one in releases them)."""
    for r in range(len(enter)):
        w.op(r, pg, seq, op, nbytes, int(enter[r]), int(end))


def nic(rank: int) -> str:
    """The NIC of rank ``rank`` in jobs of one rank per host ``node00<rank>``."""
    return f"node00{rank}/nic0"


def one_rank_hosts(w: TraceWriter, n: int) -> None:
    """Ranks ``0 .. n - 1``, rank r alone on host ``node00<r>`` with its GPU and :func:`nic`."""
    for r in range(n):
        w.rank(r, f"node00{r}", gpu=f"node00{r}/gpu0", nic=nic(r))


def advance_quietly(eng: Engine, t: int, steps: int, *, heard: Iterable[int] = (),
                    every: int = 10, step_ns: int = 100_000_000) -> list[FaultReport]:
    """Advance ``eng`` ``steps`` times by ``step_ns`` past ``t`` with no new rows, hearing the
    ranks ``heard`` (their collectors' heartbeats) every ``every`` steps: the reports filed
    meanwhile, every revision."""
    out: list[FaultReport] = []
    ranks = list(heard)
    for k in range(1, steps + 1):
        now = t + k * step_ns
        if ranks and k % every == 0:
            eng.heard(ranks, now)
        out += eng.advance(now)
    return out


def top(report: FaultReport) -> tuple[str, str]:
    """A report's first suspect: (type, id)."""
    return report.suspects[0].type, report.suspects[0].id


def diagnose_written(path: Path, write: Callable[..., None], engine: Engine | None = None,
                     *, block_bytes: int = 4 << 20, **scenario: Any) -> list[FaultReport]:
    """Write ``path`` with ``write(path, **scenario)``, then read it as `c4 analyze` would:
    the engine's reports."""
    write(path, **scenario)
    reports, _ = feed_trace(engine if engine is not None else Engine(), path,
                            block_bytes=block_bytes)
    return reports


def sim_config(base: dict[str, Any], faults: Sequence[str] = (), **kw: Any) -> SimConfig:
    """A test's ``base`` job with ``kw`` over it and ``faults`` in the command line's form
    (``slow_gpu:auto@10,slow=2``)."""
    return SimConfig(**{**base, **kw}, faults=tuple(FaultSpec.parse(f) for f in faults))


def simulate_and_diagnose(folder: Path, cfg: SimConfig, **feed: Any
                          ) -> tuple[list[FaultReport], dict[str, Any], FeedStats]:
    """Simulate ``cfg`` into ``folder`` and read its trace as `c4 analyze` would, on the
    simulated topology (``feed``: ``feed_trace``'s options): the reports, the ground truth
    (truth.json) and what was read."""
    res = simulate(cfg, folder)
    reports, stats = feed_trace(Engine(Topology.load(res.topology)), res.trace, **feed)
    return reports, json.loads(res.truth.read_text()), stats


def synth_and_diagnose(path: Path, job: SynthJob, *, topology: bool = True, **feed: Any
                       ) -> list[FaultReport]:
    """Write the synthetic ``job`` to ``path`` and read it back as `c4 analyze` would, with
    its topology (or, not ``topology``, without one): the reports."""
    topo = job.topology()
    job.write(path, topo)
    reports, _ = feed_trace(Engine(topo if topology else None), path, **feed)
    return reports


def sampled_stragglers(hosts: int, n: int, k: int, pace_ns: int) -> SampledStragglers:
    """The sampled-call stragglers of ``hosts`` groups of ``n`` ranks (``tp.0``, ...: host
    ``h`` holds ranks ``n * h`` on) at one call in ``k``, each group's pace ``pace_ns`` as
    progress would tell it."""
    arena = Arena(16)
    for h in range(hosts):
        arena.add_group(h, f"tp.{h}", np.arange(n * h, n * h + n))
    cfg = EngineConfig()
    timing = GroupTiming(arena, cfg)
    timing.pace = lambda groups, min_periods=1: np.full(len(groups), float(pace_ns))
    st = SampledStragglers(arena, timing, cfg)
    st.sample = k
    return st


def feed_kept_calls(st: SampledStragglers, enter: np.ndarray, first: int) -> None:
    """Kept calls to ``st``: ``enter`` (groups, calls, members) their entries (ns), the calls
    numbered from ``first`` (seq ``first * K`` on, K the stragglers' factor), each 1 ms long."""
    groups, calls, n = enter.shape
    rows = enter.astype(np.int64).reshape(-1, n)
    seq = np.tile((first + np.arange(calls)) * st.sample, groups)
    g = np.repeat(np.arange(groups), calls)
    st.update(Finished(seq, g, seq, rows, rows + 1_000_000, np.full_like(rows, -1),
                       np.zeros(rows.shape, np.int8)))
