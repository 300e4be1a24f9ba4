"""Run a simulation to files: the trace, its topology and the ground truth."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from diagnosis.sim.config import SimConfig, SimError
from diagnosis.sim.model import Simulation
from diagnosis.sim.order import ORDERS, Reorder
from diagnosis.sim.reduced import ReducedWriter
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
    #: calls per second per rank, measured from every generated call (sampled or not)
    calls_per_s_per_rank: float = 0.0
    #: records written per type
    records: dict[str, int] = field(default_factory=dict)


@dataclass
class CallRate:
    """Calls per second per rank, measured from the generated op rows: all of them over the
    span from the first entry to the last event."""

    calls: int = 0
    first_ns: int | None = None
    last_ns: int | None = None

    def add(self, ops: dict[str, np.ndarray]) -> None:
        if not len(ops["rank"]):
            return
        self.calls += len(ops["rank"])
        first = int(ops["t_enter_ns"].min())
        last = int(max(ops["t_enter_ns"].max(), ops["t_end_ns"].max()))
        self.first_ns = first if self.first_ns is None else min(self.first_ns, first)
        self.last_ns = last if self.last_ns is None else max(self.last_ns, last)

    def per_rank_s(self, world: int) -> float:
        if self.first_ns is None or self.last_ns is None or self.last_ns <= self.first_ns:
            return 0.0
        return self.calls / world / ((self.last_ns - self.first_ns) / 1e9)


def simulate(cfg: SimConfig, out_dir: str | Path, *, compress: bool = False,
             order: str = "complete", sinks: Sequence[SinkFactory] = (),
             trace: bool = True) -> SimResult:
    """Simulate ``cfg`` and write ``trace.jsonl`` (or ``.jsonl.gz``), ``topology.json`` and
    ``truth.json`` into ``out_dir``; the trace is streamed one iteration at a time.

    ``order``: ``complete`` writes records as collectors ship them (by completion time, calls
    in flight by entry time); ``enter`` writes each iteration's records by entry time. With
    ``cfg.sample`` the trace is the reduced one of format version 2 (diagnosis.sim.reduced).

    ``sinks`` make, from the simulation and ``out_dir``, writers of other formats of the same
    run that take the op rows in completion order (``diagnosis.sim.formats``); ``trace=False``
    writes no c4 trace (only the sinks' files)."""
    if order not in ORDERS:
        raise SimError(f"order {order!r} is not one of {ORDERS}")
    if sinks and order != "complete":
        raise SimError("other formats than the trace are written in completion order: "
                       "use order 'complete'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sim = Simulation(cfg)
    sim.topo.save(out / TOPOLOGY)
    made = [make(sim, out) for make in sinks]
    path = out / (TRACE_GZ if compress else TRACE)
    rate = CallRate()
    with open_trace(path, compress) if trace else open(os.devnull, "w") as fh:
        writer = TraceWriter(fh, sim) if trace else _Counted(fh, sim)
        reduced = (ReducedWriter(writer, sim, cfg.sample, cfg.window_ns)
                   if cfg.sample is not None else None)
        n = _write(sim, writer, reduced, order, rate, made)
    if not trace:
        path = made[0].path if made else path
    records = {"op": writer.n_ops, "conn": writer.n_conns}
    for sink in made:
        records.update(sink.records())
    if reduced is not None:
        records.update(progress=reduced.n_progress, linkstat=reduced.n_linkstat,
                       port=reduced.n_port)
    per_s = rate.per_rank_s(sim.lay.world)
    (out / TRUTH).write_text(json.dumps(truth_document(sim, records, per_s), indent=1) + "\n")
    log.info("simulated %d iterations (%.0f calls/s per rank): %s", n, per_s,
             ", ".join(f"{v} {k}" for k, v in records.items()))
    return SimResult(path, out / TOPOLOGY, out / TRUTH, writer.n_ops, writer.n_conns, n,
                     per_s, records)


class Sink(Protocol):
    """Another format of the same run: takes the op rows in completion order."""

    path: Path

    def rows(self, ops: dict[str, np.ndarray], upto_ns: int) -> None: ...

    def launched(self, rows: dict[str, np.ndarray]) -> None:
        """Calls the ranks' CPUs launched that their GPUs never entered (``Batch.launched``)."""

    def end(self, end_ns: int) -> None: ...

    def records(self) -> dict[str, int]: ...


SinkFactory = Callable[[Simulation, Path], Sink]


class _Counted(TraceWriter):
    """Counts the rows of a trace that is not written."""

    def header(self, sample: int | None = None) -> None:
        pass

    def rows(self, ops: dict[str, np.ndarray], conns: dict[str, np.ndarray]) -> None:
        self.n_ops += len(ops["rank"]) if ops else 0
        self.n_conns += len(conns["conn"]) if conns else 0

    def end(self) -> None:
        pass


def _write(sim: Simulation, writer: TraceWriter, reduced: ReducedWriter | None, order: str,
           rate: CallRate, sinks: Sequence[Sink] = ()) -> int:
    """Stream the simulation's records to the trace; returns the iterations simulated."""
    cfg = sim.cfg
    (reduced or writer).header()
    reorder = Reorder(int(cfg.clock_skew_us * 1e3))
    n = 0
    upto = cfg.t0_ns
    for batch in sim.run():
        rate.add(batch.ops)
        upto = reorder.horizon(sim.iteration_start[-1])
        if reduced is not None:
            reduced.observe(batch)
        rows = reorder.push(batch, sim.iteration_start[-1]) if order == "complete" \
            else (batch.ops, batch.conns)
        _rows(writer, reduced, rows, upto)
        for sink in sinks:
            sink.rows(rows[0], upto)
            sink.launched(batch.launched)
        n += 1
    if order == "complete":
        rows = reorder.flush()
        _rows(writer, reduced, rows, upto)
        for sink in sinks:
            sink.rows(rows[0], upto)
    if reduced is not None:
        reduced.end()
    else:
        writer.end()
    for sink in sinks:
        sink.end(sim.end_ns)
    return n


def _rows(writer: TraceWriter, reduced: ReducedWriter | None, rows: tuple[dict, dict],
          upto: int) -> None:
    if reduced is None:
        writer.rows(*rows)
    else:
        reduced.release(rows[0], upto)


def truth_document(sim: Simulation, records: dict[str, int],
                   calls_per_s_per_rank: float = 0.0) -> dict[str, Any]:
    """The ground truth (format in diagnosis/sim/README.md); ``records``: counts by type."""
    cfg = sim.cfg
    every = cfg.checkpoint_every
    ran = len(sim.iteration_start)
    return {
        "version": 1,
        "job": cfg.job,
        "seed": cfg.seed,
        "layout": {"gpus": cfg.gpus, "gpus_per_host": cfg.gpus_per_host, "tp": cfg.tp,
                   "pp": cfg.pp, "dp": cfg.dp, "microbatches": cfg.microbatches,
                   "layers": cfg.layers, "conns": cfg.conns},
        "reduced": None if cfg.sample is None else {"sample": cfg.sample,
                                                    "window_ns": cfg.window_ns},
        "iterations": ran,
        "iteration_start_ns": sim.iteration_start,
        "end_ns": sim.end_ns,
        "stalled": sim.stalled,
        "records": records,
        "calls_per_s_per_rank": round(float(calls_per_s_per_rank), 1),
        "benign": {
            "warmup_iterations": min(len(cfg.warmup), ran),
            "checkpoint_iterations": [i for i in range(ran) if every and (i + 1) % every == 0],
            "gc_rate": cfg.gc_rate,
            "congestion": sim.congestion_log,
        },
        "faults": sim.truth(),
    }
