"""``c4 sim``: simulate a training job and write its trace, topology and ground truth."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer

from diagnosis.sim.config import SimConfig, SimError


def _param(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


#: what the command writes, and how; the simulated job itself comes from SimConfig's fields
OUTPUT = [
    _param("out", typer.Option(..., "--out", "-o", help="Directory for trace.jsonl, "
                               "topology.json and truth.json (created if missing)."), Path),
    _param("gzip", typer.Option(False, "--gzip", help="Write trace.jsonl.gz instead (for "
                                "storage: c4 analyze reads plain JSON Lines)."), bool),
    _param("order", typer.Option("complete", "--order", help="Line order: 'complete' (as "
                                 "collectors ship records: by completion time) or 'enter' "
                                 "(each iteration's records by entry time)."), str),
    _param("as_", typer.Option(["trace"], "--as", help="Formats to write the run in "
                               "(repeatable or comma-separated): trace (c4's, trace.jsonl), "
                               "nccl-inspector (NCCL Inspector files, one per process, in "
                               "nccl-inspector/), ncclras (ncclras -f json reports taken "
                               "every --ras-every s once the job stood still, and at the "
                               "end, in ncclras.json)."), list[str]),
    _param("inspector_verbose", typer.Option(
        True, "--inspector-verbose/--no-inspector-verbose", help="Inspector lines with their "
        "per-call times (NCCL_INSPECTOR_DUMP_VERBOSE=1, as c4 run sets)."), bool),
    _param("dump_interval_ms", typer.Option(100.0, "--dump-interval-ms",
                                            help="The Inspector's dump interval."), float),
    _param("ras_every", typer.Option(10.0, "--ras-every",
                                     help="Seconds between the ncclras reports."), float),
    _param("ras_run_ahead", typer.Option(
        -1, "--ras-run-ahead", help="In the ncclras reports, how many calls past the one its "
        "GPU waits in a stuck rank's CPU has launched at most (RAS counts launches); -1: every "
        "call up to the end of the iteration (the host synchronisation of the optimizer "
        "step)."), int),
    _param("health", typer.Option(False, "--health", help="Append node health series (GPU, "
                                  "NIC port, host PSI samples every --health-interval) as "
                                  "health records; see diagnosis/sim/health.py."), bool),
    _param("health_cause", typer.Option("", "--health-cause", help="Plant a health cause "
                                        "behind the run's fault: thermal, pcie_downtrain, "
                                        "ecc_storm (slow_gpu), cpu_contention (slow_host), "
                                        "noisy_ib_port (slow_nic). Implies --health."), str),
    _param("health_decoys", typer.Option(0, "--health-decoys", help="Causes planted on "
                                         "components without a timing fault (never to be "
                                         "named as a cause). Implies --health."), int),
    _param("health_interval", typer.Option(1.0, "--health-interval",
                                           help="Seconds between health samples."), float),
]


def run_sim(*, out: Path, gzip: bool, order: str, as_: list[str], inspector_verbose: bool,
            dump_interval_ms: float, ras_every: float, ras_run_ahead: int, health: bool,
            health_cause: str, health_decoys: int, health_interval: float, **job: Any) -> None:
    """Simulate a 3D-parallel training job (with injected faults) and write trace.jsonl (or
    NCCL's own telemetry: --as), topology.json and truth.json into --out."""
    from c4.output import make_console
    from c4.settings import build
    from diagnosis.sim.formats import sinks_for
    from diagnosis.sim.run import simulate

    formats = [f.strip() for item in as_ for f in item.split(",") if f.strip()]
    try:
        sinks = sinks_for(formats, verbose=inspector_verbose,
                          dump_interval_us=int(dump_interval_ms * 1000), ras_every_s=ras_every,
                          ras_run_ahead=None if ras_run_ahead == -1 else ras_run_ahead)
        cfg = build(SimConfig, job, SimError)
        if sinks and cfg.sample:
            raise SimError("--as nccl-inspector/ncclras writes every call: leave out --sample")
        res = simulate(cfg, out, compress=gzip, order=order, sinks=sinks,
                       trace="trace" in formats)
        if health or health_cause or health_decoys:
            if "trace" not in formats:
                raise SimError("--health appends to trace.jsonl: give --as trace too")
            if gzip:
                raise SimError("--health appends to trace.jsonl: leave out --gzip")
            from diagnosis.sim.health import add_health

            add_health(out, cause=health_cause or None, decoys=health_decoys,
                       interval_s=health_interval, seed=cfg.seed)
    except SimError as exc:
        raise typer.BadParameter(str(exc)) from None
    con = make_console()
    counts = ", ".join(f"{n:,} {kind}" for kind, n in res.records.items() if n)
    con.print(f"{res.iterations} iterations, {res.calls_per_s_per_rank:.0f} calls/s per rank; "
              f"records: {counts}")
    con.print(f"{'trace' if 'trace' in formats else 'output':<8} {res.trace}\n"
              f"topology {res.topology}\ntruth    {res.truth}")


def register(app: typer.Typer) -> None:
    from c4.settings import derive_command

    app.command("sim")(derive_command(SimConfig, run_sim, OUTPUT))
