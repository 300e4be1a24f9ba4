"""Three ways to get reports for a simulated run.

``cli``: write the trace and run ``c4 analyze TRACE --topology TOPO --format json`` in a
subprocess, exactly as a user does. ``trace``: the same code path (trace reader feeding the
engine) in this process. ``stream``: feed the simulation's records to
``diagnosis.engine.Engine`` as a daemon would receive them, calling ``advance`` every second of
trace time, and note when each report first appeared (``detected_ns``): the online detection
latency. With every call recorded (version 1) the daemon receives each op and conn row once it
has completed (or once entered, started, if it never does); with reduced telemetry (``c4 sim
--sample K``) it receives what the job's edge ships (:class:`EdgeFeed`): the sampled op rows
as they complete, each window's ``progress`` and ``linkstat`` records once the window has
closed, and the NIC ``port`` records at their time.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from c4.proto.codec import Columns
from diagnosis.sim.config import SimConfig
from diagnosis.sim.model import Batch, Simulation
from diagnosis.sim.reduced import SimEdge

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


def analyze_cli(trace: Path, topology: Path, timeout_s: float = 900.0) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "c4", "analyze", str(trace), "--topology", str(topology),
         "--format", "json"],
        capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"c4 analyze failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)["reports"]


def analyze_trace(trace: Path, topology: Path) -> list[dict[str, Any]]:
    """What ``c4 analyze TRACE --topology TOPO`` does, in this process: the trace reader feeding
    the engine (no subprocess start-up, no JSON round trip of the reports). A reduced trace
    (format version 2) is read as written: its meta record tells the engine the sampling
    factor, and its progress, linkstat and port records reach the engine with the op rows."""
    from c4.report import reports_to_json
    from c4.topology import Topology
    from diagnosis.engine import Engine
    from diagnosis.trace.feed import feed_trace

    engine = Engine(Topology.load(topology))
    reports, _ = feed_trace(engine, trace)
    return reports_to_json(reports)["reports"]


def analyze_file(trace: Path, topology: Path, cli: bool = False) -> list[dict[str, Any]]:
    """Reports for a trace file, in process (or through ``c4 analyze`` with ``cli``)."""
    return analyze_cli(trace, topology) if cli else analyze_trace(trace, topology)


def conn_records(sim: Simulation, c: dict[str, np.ndarray]):
    """Simulated conn rows as the engine's ConnRecords (paths included)."""
    from diagnosis.engine.records import ConnRecords

    net = sim.conns
    idx = c["conn"]
    paths = [tuple(json.loads(net.path_json[k])) for k in idx.tolist()] if sim.cfg.paths \
        else None
    return ConnRecords(net.src[idx], net.dst[idx], c["bytes"], c["t_start_ns"], c["t_end_ns"],
                       c["pg"], c["seq"], list(sim.strings), paths)


# ----- the edge's reduced records as the engine's record classes ---------------------------------
def progress_records(p: Columns):
    """The reducer's ``progress`` columns (``c4.reduce.Reduced``) as ProgressRecords:
    the same columns, -1 for what a trace line leaves out."""
    from diagnosis.engine.records import ProgressRecords

    c = p.columns
    return ProgressRecords(c["rank"], c["pg"], c["op"], c["peer"], c["t_ns"], c["entered"],
                           c["completed"], list(p.strings))


def linkstat_records(ls: Columns, path_of: Callable[[int], tuple[str, ...] | None] | None):
    """The reducer's ``linkstat`` columns as LinkStatRecords; ``path_of`` turns the caller's
    path id (the column ``path``, -1: none) into the route's topology node ids (None: the
    records carry no routes)."""
    from diagnosis.engine.records import LinkStatRecords

    c = ls.columns
    paths = None if path_of is None else [None if k < 0 else path_of(k)
                                          for k in c["path"].tolist()]
    return LinkStatRecords(c["src"], c["dst"], c["t_ns"], c["window_ns"], c["pg"],
                           c["transfers"], c["bytes"], c["busy_ns"], c["max_ns"], c["open"],
                           c["open_since_ns"], c["retrans"], list(ls.strings), paths)


def port_records(events: list) -> Any:
    """The node sidecars' port samples (``diagnosis.sim.ports.PortEvent``) as PortRecords,
    with the counters a ``port`` line of the reduced trace carries."""
    from diagnosis.engine.records import PortRecords

    return PortRecords.build([e.host for e in events], [e.nic for e in events],
                             [e.t_ns for e in events],
                             ["up" if e.up else "down" for e in events],
                             link_downed=[e.link_downed for e in events])


class EdgeFeed(SimEdge):
    """What a live daemon receives from the edge of a job whose telemetry is reduced at factor
    ``sample`` (the collectors and node sidecars, ``c4.reduce.EdgeReducer``), built from
    the simulation as ``diagnosis.sim.reduced`` builds the reduced trace, and handed to the
    engine as it becomes visible: :meth:`observe` every simulated batch (each call's entry and
    completion, each transfer, ahead of their release), :meth:`release` at each step the op
    rows completed by then (sampled), the port changes up to then and the windows that closed
    (the step's time is the reducer's watermark: nothing earlier is still to come), then
    :meth:`end`."""

    def __init__(self, sim: Simulation, engine: Any, sample: int, window_ns: int) -> None:
        super().__init__(sim, sample, window_ns)
        self.engine = engine
        self.ports_due = list(self.ports.initial())
        self._polled_final = False
        self._paths: dict[int, tuple[str, ...] | None] = {}
        self.counts = dict.fromkeys(("op", "conn", "progress", "linkstat", "port"), 0)
        engine.set_sample(sample)

    def release(self, ops: dict[str, np.ndarray], now_ns: int) -> None:
        if ops and len(ops["rank"]):
            kept = self.sampled(ops)
            if len(kept):
                self.engine.add_ops(kept)
                self.counts["op"] += len(kept)
        if self.sim.done and not self._polled_final:
            # the simulation is over: a dead component no transfer revealed is known now,
            # and its port went down at the moment it died
            self._polled_final = True
            self.ports_due += self.ports.poll(final=True)
        self._ports(now_ns)
        self._windows(self.reducer.advance(now_ns))

    def end(self, end_ns: int) -> None:
        """The port changes not yet fed and the windows up to the end of recording."""
        if not self._polled_final:
            self._polled_final = True
            self.ports_due += self.ports.poll(final=True)
        self._ports(max([end_ns, *(e.t_ns for e in self.ports_due)]))
        self._windows(self.reducer.flush(end_ns))
        self.check_late()

    def _ports(self, upto_ns: int) -> None:
        now = sorted((e for e in self.ports_due if e.t_ns <= upto_ns),
                     key=lambda e: (e.t_ns, e.nic))
        if now:
            self.ports_due = [e for e in self.ports_due if e.t_ns > upto_ns]
            self.engine.add_ports(port_records(now))
            self.counts["port"] += len(now)

    def _windows(self, red: Any) -> None:
        if len(red.progress):
            self.engine.add_progress(progress_records(red.progress))
            self.counts["progress"] += len(red.progress)
        if len(red.linkstat):
            self.engine.add_linkstats(linkstat_records(
                red.linkstat, self._path if self.sim.cfg.paths else None))
            self.counts["linkstat"] += len(red.linkstat)

    def _path(self, conn: int) -> tuple[str, ...] | None:
        if conn not in self._paths:
            text = self.sim.conns.path_json[conn]
            self._paths[conn] = tuple(json.loads(text)) if text else None
        return self._paths[conn]


# ----- stream mode -------------------------------------------------------------------------------
def new_engine(sim: Simulation, step_s: float | None = None):
    """An engine placed as the simulated job; ``step_s``: advanced that often, as the daemon's
    live view advances its engines every analysis interval."""
    from diagnosis.engine import Engine, EngineConfig

    eng = Engine(sim.topo, None if step_s is None else EngineConfig.analysed_every(step_s))
    lay = sim.lay
    for r in range(lay.world):
        eng.add_rank(r, lay.hosts[lay.host_of[r]], gpu=lay.gpu[r], nic=lay.nic[r])
    for pg, ranks in lay.groups:
        eng.add_group(pg, ranks)
    return eng


def time_cut(sim: Simulation, step_ns: int, observe: Callable[[Batch], None] | None = None
             ) -> Iterator[tuple[int, dict, dict]]:
    """The simulation's records as the daemon would hold them at wall times T, T+step, ...:
    each op and conn row becomes visible when it completes (``t_end_ns``), or when it was
    entered or started if it never completes (collectors report calls in flight). Yields
    (T, op columns, conn columns) of the rows that became visible up to T; every event before T
    has been simulated by then (and handed to ``observe``, batch by batch, as simulated)."""
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
        if observe is not None:
            observe(b)
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
    returns (reports with ``detected_ns``, truth). With ``cfg.sample`` the engine gets the
    reduced telemetry of that factor (:class:`EdgeFeed`), else every row."""
    from diagnosis.sim.run import CallRate, truth_document

    sim = Simulation(cfg)
    rate = CallRate()
    eng = new_engine(sim, step_s)
    edge = None if cfg.sample is None else EdgeFeed(sim, eng, cfg.sample, cfg.window_ns)
    seen: dict[str, int] = {}
    n_ops = n_conns = 0
    for now, ops, cons in time_cut(sim, int(step_s * 1e9),
                                   None if edge is None else edge.observe):
        if ops and len(ops["rank"]):
            rate.add(ops)
        if edge is not None:
            edge.release(ops, now)
        else:
            if ops and len(ops["rank"]):
                eng.add_ops(Columns(ops, list(sim.strings)))
                n_ops += len(ops["rank"])
            if cons and len(cons["conn"]):
                eng.add_conns(conn_records(sim, cons))
                n_conns += len(cons["conn"])
        for r in eng.advance(now):
            seen.setdefault(_identity(r), now)
    if edge is not None:
        edge.end(sim.end_ns)
    final = eng.finish(sim.end_ns)
    out = []
    for r in final:
        d = r.to_json()
        d["detected_ns"] = max(seen.get(_identity(r), sim.end_ns), int(r.first_seen_ns))
        out.append(d)
    records = {"op": n_ops, "conn": n_conns} if edge is None else dict(edge.counts)
    return out, truth_document(sim, records, rate.per_rank_s(sim.lay.world))


def _identity(r) -> str:
    top = r.suspects[0] if r.suspects else None
    return r.id or f"{r.kind}|{top.type if top else ''}|{top.id if top else ''}"


def trace_span_s(truth: dict[str, Any]) -> float:
    starts = truth.get("iteration_start_ns") or [0]
    return (truth["end_ns"] - starts[0]) / 1e9
