"""The recorded NCCL samples (``shared/fixtures/nccl``, described in its FORMATS.md and
SOURCES.md), and small simulated jobs written as NCCL would have written them."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from tests.support.topology_fixtures import topo_fixture


def fixture(name: str) -> Path:
    """One recorded sample; skips the test when the shared fixtures are absent."""
    return topo_fixture(name, "nccl")


def local_ns(stamp: str) -> int:
    """``%F %T`` in this machine's time zone as epoch ns (how ncclras prints times)."""
    return int(time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) * 1e9)


@functools.lru_cache(maxsize=8)
def simulated(tmp_root: str, fault: str | None, gpus: int = 64, iterations: int = 14,
              formats: tuple[str, ...] = ("nccl-inspector", "ncclras"),
              verbose: bool = True, seed: int = 3, ras_run_ahead: int | None = None,
              ras_every_s: float = 10.0, layers: int = 1) -> Path:
    """A small simulated job (pipeline of 2, TP 8) written in ``formats`` under ``tmp_root``;
    ``ras_run_ahead`` and ``ras_every_s`` as ``c4 sim --ras-run-ahead`` (None: to the end of
    the iteration) and ``--ras-every``."""
    from diagnosis.sim.config import FaultSpec, SimConfig
    from diagnosis.sim.formats import sinks_for
    from diagnosis.sim.run import simulate

    out = Path(tmp_root) / (f"{fault or 'healthy'}-{gpus}-{'-'.join(formats)}-{int(verbose)}"
                            f"-{seed}-{ras_run_ahead}-{ras_every_s}-{layers}")
    cfg = SimConfig(gpus=gpus, pp=2, iterations=iterations, microbatches=2, job="t",
                    faults=(FaultSpec.parse(fault),) if fault else (), seed=seed,
                    checkpoint_every=0, layers=layers)
    simulate(cfg, out, sinks=sinks_for([f for f in formats if f != "trace"], verbose=verbose,
                                       ras_run_ahead=ras_run_ahead, ras_every_s=ras_every_s),
             trace="trace" in formats)
    return out
