"""The human-readable summary of a plan (``c4 plan --format table``)."""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence

from rich.console import Console
from rich.table import Table

from c4.output import make_console
from traffic_planner.plan import PlanResult
from traffic_planner.predict import predict_rings


def print_table(result: PlanResult, down: Collection[str],
                previous: Mapping[str, Sequence[str]] | None, nbytes: float, show: int,
                console: Console | None = None) -> None:
    console = console or make_console()
    p, sol = result.problem, result.solution
    summary = Table(title="traffic plan", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("flows", str(len(p.flows)))
    summary.add_row("links down", str(len(down)))
    if result.ecmp:
        summary.add_row("max link load, ECMP (mean / worst over seeds)",
                        f"{result.ecmp.mean:.3f} / {result.ecmp.worst:.3f}")
    summary.add_row("max link load, plan", f"{sol.max_load:.3f} ({sol.at_max} links)")
    if result.bound:
        summary.add_row("lower bound (fractional LP)", f"{result.bound.value:.3f}")
        summary.add_row("plan / bound", f"{sol.max_load / result.bound.value:.3f}")
        if result.bound.unsplittable > result.bound.value * (1 + 1e-9):
            summary.add_row("lower bound for whole (unsplit) flows",
                            f"{result.bound.unsplittable:.3f}")
    if previous is not None:
        summary.add_row("flows moved from the previous plan", str(sol.moved))
    elif result.ecmp:
        moved = sum(1 for a, b in zip(result.ecmp.choices[0], sol.choice, strict=True) if a != b)
        summary.add_row("flows steered off their ECMP path (seed 0)", str(moved))
    console.print(summary)

    plan_rings = predict_rings(p, sol.choice, nbytes)
    ecmp_rate: dict[str, list[float]] = {}
    for choice in result.ecmp.choices if result.ecmp else []:
        for r in predict_rings(p, choice, nbytes):
            ecmp_rate.setdefault(r.group, []).append(r.bottleneck_gbps)
    rings = Table(title=f"ring all-reduce of {nbytes / 2**30:g} GiB, slowest first")
    for col in ("collective", "ranks", "bottleneck Gbit/s", "time ms", "busbw GB/s",
                "ECMP busbw GB/s"):
        rings.add_column(col, justify="left" if col == "collective" else "right")
    for r in plan_rings[:show]:
        ecmp = ecmp_rate.get(r.group)
        rings.add_row(r.group or "(all)", str(r.ranks), f"{r.bottleneck_gbps:.1f}",
                      f"{r.seconds * 1e3:.2f}", f"{r.busbw_gbytes:.2f}",
                      f"{statistics.fmean(ecmp) / 8:.2f}" if ecmp else "-")
    console.print(rings)

    flows = Table(title=f"flows (first {min(show, len(p.flows))} of {len(p.flows)})")
    for col in ("id", "gbps", "path", "udp sport"):
        flows.add_column(col)
    for f in range(min(show, len(p.flows))):
        sport = result.sports[f] if result.sports else None
        flows.add_row(p.flows[f].id, f"{p.demand[f]:g}", " > ".join(result.path(f)),
                      "-" if sport is None else str(sport))
    console.print(flows)
