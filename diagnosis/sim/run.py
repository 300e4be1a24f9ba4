"""Run a simulation to files: the trace, its topology and the ground truth."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnosis.sim.config import SimConfig, SimError
from diagnosis.sim.model import Simulation
from diagnosis.sim.order import ORDERS, Reorder
from diagnosis.sim.writer import TraceWriter, open_trace

log = logging.getLogger(__name__)

TRACE, TRACE_GZ, TOPOLOGY, TRUTH = "trace.jsonl", "trace.jsonl.gz", "topology.json", "truth.json"


@dataclass(frozen=True)
class SimResult:
    trace: Path
    topology: Path
    truth: Path
    ops: int
    conns: int
    iterations: int


def simulate(cfg: SimConfig, out_dir: str | Path, *, compress: bool = False,
             order: str = "complete") -> SimResult:
    """Simulate ``cfg`` and write ``trace.jsonl`` (or ``.jsonl.gz``), ``topology.json`` and
    ``truth.json`` into ``out_dir``; the trace is streamed one iteration at a time.

    ``order``: ``complete`` writes records as collectors ship them (by completion time, calls
    in flight by entry time); ``enter`` writes each iteration's records by entry time."""
    if order not in ORDERS:
        raise SimError(f"order {order!r} is not one of {ORDERS}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sim = Simulation(cfg)
    sim.topo.save(out / TOPOLOGY)
    trace = out / (TRACE_GZ if compress else TRACE)
    n = 0
    with open_trace(trace, compress) as fh:
        writer = TraceWriter(fh, sim)
        writer.header()
        reorder = Reorder(int(cfg.clock_skew_us * 1e3))
        for batch in sim.run():
            if order == "complete":
                writer.rows(*reorder.push(batch, sim.iteration_start[-1]))
            else:
                writer.rows(batch.ops, batch.conns)
            n += 1
        if order == "complete":
            writer.rows(*reorder.flush())
        writer.end()
    (out / TRUTH).write_text(json.dumps(truth_document(sim, writer.n_ops, writer.n_conns),
                                        indent=1) + "\n")
    log.info("simulated %d iterations: %d op and %d conn records", n, writer.n_ops,
             writer.n_conns)
    return SimResult(trace, out / TOPOLOGY, out / TRUTH, writer.n_ops, writer.n_conns, n)


def truth_document(sim: Simulation, n_ops: int, n_conns: int) -> dict[str, Any]:
    """The ground truth (format in diagnosis/sim/README.md)."""
    cfg = sim.cfg
    every = cfg.checkpoint_every
    ran = len(sim.iteration_start)
    return {
        "version": 1,
        "job": cfg.job,
        "seed": cfg.seed,
        "layout": {"gpus": cfg.gpus, "gpus_per_host": cfg.gpus_per_host, "tp": cfg.tp,
                   "pp": cfg.pp, "dp": cfg.dp, "microbatches": cfg.microbatches,
                   "conns": cfg.conns},
        "iterations": ran,
        "iteration_start_ns": sim.iteration_start,
        "end_ns": sim.end_ns,
        "stalled": sim.stalled,
        "records": {"op": n_ops, "conn": n_conns},
        "benign": {
            "warmup_iterations": min(len(cfg.warmup), ran),
            "checkpoint_iterations": [i for i in range(ran) if every and (i + 1) % every == 0],
            "gc_rate": cfg.gc_rate,
            "congestion": sim.congestion_log,
        },
        "faults": sim.truth(),
    }
