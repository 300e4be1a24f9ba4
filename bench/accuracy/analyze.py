"""Two ways to get reports for a simulated run.

``cli``: write the trace and run ``c4 analyze TRACE --topology TOPO --format json`` in a
subprocess, exactly as a user does (trace reader included). ``stream``: feed the simulation's
batches to ``diagnosis.engine.Engine`` one iteration at a time, calling ``advance`` at each
iteration boundary, and note when each report first appeared (``detected_ns``): the online
detection latency the daemon would have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from diagnosis.sim.config import SimConfig
from diagnosis.sim.model import Batch, Simulation
from proto.codec import Columns

REPO = Path(__file__).resolve().parents[2]


def analyze_cli(trace: Path, topology: Path, timeout_s: float = 900.0) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "c4", "analyze", str(trace), "--topology", str(topology),
         "--format", "json"],
        capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"c4 analyze failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)["reports"]


def conn_records(sim: Simulation, b: Batch):
    """A batch's conn rows as the engine's ConnRecords (paths included)."""
    from diagnosis.engine.records import ConnRecords

    c, net = b.conns, sim.conns
    idx = c["conn"]
    paths = [tuple(json.loads(net.path_json[k])) for k in idx.tolist()]
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


def analyze_stream(cfg: SimConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Simulate and diagnose in one pass; returns (reports with ``detected_ns``, truth)."""
    from diagnosis.sim.run import truth_document

    sim = Simulation(cfg)
    eng = new_engine(sim)
    seen: dict[str, int] = {}

    def note(reports, now: int) -> None:
        for r in reports:
            seen.setdefault(_identity(r), now)

    n_ops = n_conns = 0
    for b in sim.run():
        eng.add_ops(Columns(dict(b.ops), list(sim.strings)))
        n_ops += len(b.ops["rank"])
        if len(b.conns["conn"]):
            eng.add_conns(conn_records(sim, b))
            n_conns += len(b.conns["conn"])
        now = int(max(b.ops["t_end_ns"].max(initial=0), b.ops["t_enter_ns"].max(initial=0)))
        note(eng.advance(now), now)
    final = eng.finish(sim.end_ns)
    note(final, sim.end_ns)
    out = []
    for r in final:
        d = r.to_json()
        d["detected_ns"] = max(seen.get(_identity(r), sim.end_ns), int(r.first_seen_ns))
        out.append(d)
    return out, truth_document(sim, n_ops, n_conns)


def _identity(r) -> str:
    top = r.suspects[0] if r.suspects else None
    return r.id or f"{r.kind}|{top.type if top else ''}|{top.id if top else ''}"


def trace_span_s(truth: dict[str, Any]) -> float:
    starts = truth.get("iteration_start_ns") or [0]
    return (truth["end_ns"] - starts[0]) / 1e9

