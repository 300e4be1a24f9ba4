"""The formats ``c4 sim --as`` writes a run in: c4's trace, and NCCL's own telemetry (the
Inspector's JSON lines, ``ncclras`` JSON reports), so that accuracy is measured on what a real
job's NCCL would have written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from diagnosis.sim.config import SimError
from diagnosis.sim.inspector import InspectorWriter
from diagnosis.sim.model import Simulation
from diagnosis.sim.ras import RasWriter

__all__ = ["FORMATS", "INSPECTOR_DIR", "RAS_FILE", "sinks_for"]

FORMATS = ("trace", "nccl-inspector", "ncclras")
INSPECTOR_DIR = "nccl-inspector"
RAS_FILE = "ncclras.json"


@dataclass
class _InspectorSink:
    writer: InspectorWriter
    path: Path

    def rows(self, ops: dict[str, np.ndarray], upto_ns: int) -> None:
        self.writer.rows(ops, upto_ns)

    def launched(self, rows: dict[str, np.ndarray]) -> None:
        pass        # the Inspector writes completed operations only

    def end(self, end_ns: int) -> None:
        self.writer.end(end_ns)

    def records(self) -> dict[str, int]:
        return {"inspector": self.writer.n_lines, "inspector_lost": self.writer.n_lost}


@dataclass
class _RasSink:
    writer: RasWriter
    path: Path

    def rows(self, ops: dict[str, np.ndarray], upto_ns: int) -> None:
        self.writer.rows(ops)

    def launched(self, rows: dict[str, np.ndarray]) -> None:
        self.writer.launched(rows)

    def end(self, end_ns: int) -> None:
        self.writer.end(end_ns)

    def records(self) -> dict[str, int]:
        return {"ras_reports": self.writer.n_reports}


def _inspector(sim: Simulation, out: Path, verbose: bool, interval_us: int) -> _InspectorSink:
    path = out / INSPECTOR_DIR
    return _InspectorSink(InspectorWriter(sim, path, dump_interval_us=interval_us,
                                          verbose=verbose), path)


def _ras(sim: Simulation, out: Path, every_s: float, run_ahead: int | None) -> _RasSink:
    path = out / RAS_FILE
    return _RasSink(RasWriter(sim, path, every_s, run_ahead), path)


def sinks_for(formats: list[str] | tuple[str, ...], *, verbose: bool = True,
              dump_interval_us: int = 100_000, ras_every_s: float = 10.0,
              ras_run_ahead: int | None = None) -> list[Callable[..., Any]]:
    """Writers (as ``diagnosis.sim.run.simulate`` takes them) for the formats other than
    ``trace``; raises SimError naming an unknown one. ``ras_run_ahead``: how many calls past
    the one its GPU waits in a rank's CPU launches at most (None: up to the end of the
    iteration, see :class:`~diagnosis.sim.ras.RasWriter`)."""
    if ras_run_ahead is not None and ras_run_ahead < 0:
        raise SimError(f"--ras-run-ahead {ras_run_ahead}: give a number of calls >= 0 (or "
                       "leave it out: up to the end of the iteration)")
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise SimError(f"--as {', '.join(unknown)}: choose from {', '.join(FORMATS)}")
    out: list[Callable[..., Any]] = []
    if "nccl-inspector" in formats:
        out.append(partial(_inspector, verbose=verbose, interval_us=dump_interval_us))
    if "ncclras" in formats:
        out.append(partial(_ras, every_s=ras_every_s, run_ahead=ras_run_ahead))
    return out
