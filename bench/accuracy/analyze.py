"""Three ways to get reports for a simulated run.

``cli``: write the trace and run ``c4 analyze TRACE --topology TOPO --format json`` in a
subprocess, exactly as a user does. ``trace``: the same code path (trace reader feeding the
engine) in this process. ``stream``: feed the simulation's
records to ``diagnosis.engine.Engine`` as a daemon would receive them (each row once it has
completed, or once entered if it never does), calling ``advance`` every second of trace time,
and note when each report first appeared (``detected_ns``): the online detection latency.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from diagnosis.sim.config import SimConfig
from diagnosis.sim.model import Simulation
from proto.codec import Columns

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)

#: how a trace was analysed: as written, or (a version 2 trace that this c4's trace reader
#: refused) as the version 1 trace of its sampled calls
AS_WRITTEN, V1_PROJECTION = "as written", "v1 projection"


def analyze_cli(trace: Path, topology: Path, timeout_s: float = 900.0) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "c4", "analyze", str(trace), "--topology", str(topology),
         "--format", "json"],
        capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"c4 analyze failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)["reports"]


def analyze_trace(trace: Path, topology: Path, sample: int = 1) -> list[dict[str, Any]]:
    """What ``c4 analyze TRACE --topology TOPO`` does, in this process: the trace reader feeding
    the engine (no subprocess start-up, no JSON round trip of the reports). ``sample``: the
    engine is told that the calls were sampled at that factor (for a projected trace, whose
    meta record cannot say so)."""
    from diagnosis.engine import Engine
    from diagnosis.report import reports_to_json
    from diagnosis.topology import Topology
    from diagnosis.trace.feed import feed_trace

    engine = Engine(Topology.load(topology))
    if sample > 1:
        engine.set_sample(sample)
    reports, _ = feed_trace(engine, trace)
    return reports_to_json(reports)["reports"]


def analyze_file(trace: Path, topology: Path, cli: bool = False
                 ) -> tuple[list[dict[str, Any]], str]:
    """Reports for a trace file, in process (or through ``c4 analyze`` with ``cli``), and how
    it was read. A reduced trace (format version 2) that the trace reader refuses is analysed
    as the version 1 trace of its sampled calls, so that the bench runs with a reader that
    predates version 2 and the engine simply finds less; in process, the engine is told the
    sampling factor (``c4 analyze`` cannot be)."""
    from bench.accuracy.rewrite import project_v1

    run = analyze_cli if cli else analyze_trace
    try:
        return run(trace, topology), AS_WRITTEN
    except Exception as exc:
        if not _refuses_v2(exc):
            raise
        log.warning("%s: the trace reader does not take format version 2 (%s); analysing its "
                    "sampled calls as version 1", trace.name, str(exc).splitlines()[-1][:200])
    projected = trace.with_name(trace.stem + ".v1.jsonl")
    sample = project_v1(trace, projected)
    try:
        if cli:
            return analyze_cli(projected, topology), V1_PROJECTION
        return analyze_trace(projected, topology, sample), V1_PROJECTION
    finally:
        projected.unlink()


def _refuses_v2(exc: Exception) -> bool:
    """Whether an analysis failed because the reader does not know version 2 (its meta
    version, or one of its record types), in process or as ``c4 analyze``'s message."""
    from diagnosis.errors import FormatError

    text = str(exc)
    if not isinstance(exc, (FormatError, RuntimeError)):
        return False
    return ("version 2" in text and "not supported" in text) or any(
        f"unknown record type '{t}'" in text for t in ("progress", "linkstat", "port"))


def conn_records(sim: Simulation, c: dict[str, np.ndarray]):
    """Simulated conn rows as the engine's ConnRecords (paths included)."""
    from diagnosis.engine.records import ConnRecords

    net = sim.conns
    idx = c["conn"]
    paths = [tuple(json.loads(net.path_json[k])) for k in idx.tolist()] if sim.cfg.paths \
        else None
    return ConnRecords(net.src[idx], net.dst[idx], c["bytes"], c["t_start_ns"], c["t_end_ns"],
                       c["pg"], c["seq"], list(sim.strings), paths)


def new_engine(sim: Simulation):
    from diagnosis.engine import Engine

    eng = Engine(topology=sim.topo)
    lay = sim.lay
    for r in range(lay.world):
        eng.add_rank(r, lay.hosts[lay.host_of[r]], gpu=lay.gpu[r], nic=lay.nic[r])
    for pg, ranks in lay.groups:
        eng.add_group(pg, ranks)
    return eng


def time_cut(sim: Simulation, step_ns: int) -> Iterator[tuple[int, dict, dict]]:
    """The simulation's records as the daemon would hold them at wall times T, T+step, ...:
    each op and conn row becomes visible when it completes (``t_end_ns``), or when it was
    entered or started if it never completes (collectors report calls in flight). Yields
    (T, op columns, conn columns) of the rows that became visible up to T."""
    pend_o: list[dict] = []
    pend_c: list[dict] = []
    now: int | None = None

    def visible(cols: dict, start: str) -> np.ndarray:
        return np.where(cols["t_end_ns"] >= 0, cols["t_end_ns"], cols[start])

    def cut(parts: list[dict], start: str, t: int) -> tuple[dict, list[dict]]:
        if not parts:
            return {}, []
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        vis = visible(cols, start)
        out = {k: v[vis <= t] for k, v in cols.items()}
        rest = {k: v[vis > t] for k, v in cols.items()}
        return out, [rest] if len(next(iter(rest.values()))) else []

    for b in sim.run():
        pend_o.append(b.ops)
        if len(b.conns["conn"]):
            pend_c.append(b.conns)
        horizon = int(b.ops["t_enter_ns"].min()) if len(b.ops["rank"]) else None
        if now is None and horizon is not None:
            now = horizon
        # rows of later iterations may still become visible before this batch's latest rows:
        # release only up to the earliest time this batch's ranks were still busy
        while horizon is not None and now + step_ns <= horizon:
            now += step_ns
            ops, pend_o = cut(pend_o, "t_enter_ns", now)
            cons, pend_c = cut(pend_c, "t_start_ns", now)
            yield now, ops, cons
    end = sim.end_ns
    while now is not None and now < end:
        now = min(now + step_ns, end)
        ops, pend_o = cut(pend_o, "t_enter_ns", now)
        cons, pend_c = cut(pend_c, "t_start_ns", now)
        yield now, ops, cons


def analyze_stream(cfg: SimConfig, step_s: float = 1.0
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Simulate and diagnose in one pass, advancing the engine every ``step_s`` of trace time;
    returns (reports with ``detected_ns``, truth)."""
    from diagnosis.sim.run import CallRate, truth_document

    sim = Simulation(cfg)
    rate = CallRate()
    eng = new_engine(sim)
    seen: dict[str, int] = {}
    n_ops = n_conns = 0
    for now, ops, cons in time_cut(sim, int(step_s * 1e9)):
        if ops and len(ops["rank"]):
            eng.add_ops(Columns(ops, list(sim.strings)))
            n_ops += len(ops["rank"])
            rate.add(ops)
        if cons and len(cons["conn"]):
            eng.add_conns(conn_records(sim, cons))
            n_conns += len(cons["conn"])
        for r in eng.advance(now):
            seen.setdefault(_identity(r), now)
    final = eng.finish(sim.end_ns)
    out = []
    for r in final:
        d = r.to_json()
        d["detected_ns"] = max(seen.get(_identity(r), sim.end_ns), int(r.first_seen_ns))
        out.append(d)
    return out, truth_document(sim, {"op": n_ops, "conn": n_conns},
                               rate.per_rank_s(sim.lay.world))


def _identity(r) -> str:
    top = r.suspects[0] if r.suspects else None
    return r.id or f"{r.kind}|{top.type if top else ''}|{top.id if top else ''}"


def trace_span_s(truth: dict[str, Any]) -> float:
    starts = truth.get("iteration_start_ns") or [0]
    return (truth["end_ns"] - starts[0]) / 1e9

