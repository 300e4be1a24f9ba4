"""``c4 plan`` (paths and RoCE source ports for a set of flows) and ``c4 flows`` (make flows
files from a job layout or an observed trace)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import typer

from c4.output import FORMAT_HELP, Format, emit_object

flows_app = typer.Typer(help="Make flows files (the NIC-to-NIC flows of a job) for c4 plan.",
                        no_args_is_help=True)


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def plan(
    topology: Path = typer.Option(..., "--topology", "-t", help="Topology JSON (node-link)."),
    flows: list[Path] = typer.Option(None, "--flows", help="Flows JSON; repeat for "
                                     "several jobs on one fabric (flow ids must differ)."),
    trace: list[Path] = typer.Option(None, "--trace", help="Take flows from a trace's conn "
                                     "records (JSON Lines); repeatable."),
    down: list[str] = typer.Option(None, "--down", help="A link id (or switch/nic id) that is "
                                   "down; repeatable."),
    faults: list[Path] = typer.Option(None, "--faults", help="A fault report JSON (c4 analyze "
                                      "--format json): avoid its link, switch and nic "
                                      "suspects; repeatable."),
    fault_threshold: float = typer.Option(0.5, "--fault-threshold", help="Avoid suspects "
                                          "scoring above this."),
    previous: Path | None = typer.Option(None, "--previous", help="A plan to re-plan from: "
                                         "flows keep their paths where still possible."),
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the JSON plan "
                                       "here too."),
    transport: str = typer.Option("roce", "--transport", help="roce: pin a UDP source port per "
                                  "flow; ip: paths only (apply with policy routes)."),
    seeds: int = typer.Option(8, "--seeds", min=1, help="ECMP hash draws to average over."),
    nbytes: float = typer.Option(float(1 << 30), "--bytes", help="All-reduce size for the "
                                 "predicted completion time."),
    show: int = typer.Option(10, "--show", help="Rows of collectives and flows in the table."),
) -> None:
    """Plan paths for flows: minimize the maximum link load; compare with ECMP and the bound."""
    from c4.errors import C4Error
    from c4.topology import Topology
    from traffic_planner.errors import PlannerError
    from traffic_planner.faults import down_from_reports, down_links
    from traffic_planner.flows import load_flows
    from traffic_planner.layout import observed_flows
    from traffic_planner.plan import load_plan_paths, plan_flows

    if transport not in ("roce", "ip"):
        raise typer.BadParameter("use roce or ip", param_hint="--transport")
    try:
        topo = Topology.load(topology)
        all_flows = [f for p in flows or [] for f in load_flows(p)]
        all_flows += [f for p in trace or [] for f in observed_flows(p, topo)]
        if not all_flows:
            raise PlannerError("no flows: give --flows FILE or --trace FILE")
        dead = down_links(topo, down or [])
        for rep in faults or []:
            dead |= down_from_reports(rep, topo, fault_threshold)
        prev = load_plan_paths(previous) if previous else None
        result = plan_flows(topo, all_flows, dead, previous=prev, roce=transport == "roce",
                            ecmp_seeds=seeds)
    except C4Error as exc:
        raise _fail(exc) from exc
    obj = result.to_json()
    if output:
        output.write_text(json.dumps(obj, indent=1) + "\n")
    if fmt is not Format.table:
        emit_object(fmt, obj)
        return
    from traffic_planner.report import print_table

    print_table(result, dead, prev, nbytes, show)


def run_flows_job(*, topology: Path, world_size: int, gbps: float, shuffle: int | None,
                  job: str, output: Path, **parallelism: Any) -> None:
    """Flows of a Megatron-style job: data-parallel rings, pipeline pairs, expert all-to-all."""
    import random

    from c4.errors import C4Error
    from c4.settings import build
    from c4.topology import Topology
    from traffic_planner.errors import ConfigError
    from traffic_planner.flows import save_flows
    from traffic_planner.layout import Parallelism, job_flows

    try:
        layout = build(Parallelism, parallelism, ConfigError)
        topo = Topology.load(topology)
        hosts = topo.hosts()
        if shuffle is not None:
            random.Random(shuffle).shuffle(hosts)
        out = job_flows(topo, world_size, layout, gbps=gbps, hosts=hosts, job=job)
    except C4Error as exc:
        raise _fail(exc) from exc
    save_flows(out, output)
    typer.echo(f"wrote {output}: {len(out)} flows")


def _param(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


#: ``c4 flows job``'s options besides the layout's (``traffic_planner.layout.Parallelism``)
FLOWS_JOB_EXTRA = [
    _param("topology", typer.Option(..., "--topology", "-t", help="Topology JSON."), Path),
    _param("world_size", typer.Option(..., "--world-size", "-n", help="Ranks in the job."), int),
    _param("gbps", typer.Option(400, "--gbps", help="Demand of each ring and pipeline flow; an "
                                "all-to-all rank splits it over its peers."), float),
    _param("shuffle", typer.Option(None, "--shuffle", help="Place the job on the hosts in a "
                                   "random order drawn from this seed (a fragmented cluster); "
                                   "default: hosts in sorted order."), int | None),
    _param("job", typer.Option("", "--job", help="Prefix for flow ids (several jobs, one "
                               "fabric)."), str),
    _param("output", typer.Option(..., "--output", "-o", help="Write the flows JSON here."),
           Path),
]


@flows_app.command("observed")
def flows_observed(
    trace: Path = typer.Argument(..., help="Trace JSON Lines with rank and conn records."),
    topology: Path = typer.Option(..., "--topology", "-t", help="Topology JSON."),
    gbps: float | None = typer.Option(None, "--gbps", help="Demand of every flow "
                                      "[default: its observed rate]."),
    output: Path = typer.Option(..., "--output", "-o", help="Write the flows JSON here."),
) -> None:
    """Flows from the connections a trace recorded (one per source, destination and group)."""
    from c4.errors import C4Error
    from c4.topology import Topology
    from traffic_planner.flows import save_flows
    from traffic_planner.layout import observed_flows

    try:
        out = observed_flows(trace, Topology.load(topology), gbps=gbps)
    except C4Error as exc:
        raise _fail(exc) from exc
    save_flows(out, output)
    typer.echo(f"wrote {output}: {len(out)} flows")


def register(app: typer.Typer) -> None:
    from c4.settings import derive_command
    from traffic_planner.layout import Parallelism

    flows_app.command("job")(derive_command(Parallelism, run_flows_job, FLOWS_JOB_EXTRA))
    app.command("plan")(plan)
    app.add_typer(flows_app, name="flows")
