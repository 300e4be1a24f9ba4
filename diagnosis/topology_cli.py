"""``c4 topology``: generate, import, discover, check and summarise cluster topologies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from c4.output import FORMAT_HELP, Format, emit_object
from c4.security.cli import with_client_security

if TYPE_CHECKING:
    import networkx as nx

topology_app = typer.Typer(help="Generate and inspect cluster topologies (node-link JSON).",
                           no_args_is_help=True)


_KINDS = "rail, dual_port, tor, three_tier, single_switch"


@topology_app.command("gen")
def gen(
    kind: str = typer.Argument("rail", help=f"Fabric: {_KINDS} ('single' = single_switch). "
                               "See c4.topology.fabrics."),
    hosts: int = typer.Option(16, "--hosts", help="Number of hosts."),
    gpus_per_host: int = typer.Option(8, "--gpus-per-host", help="GPUs per host."),
    rails: int | None = typer.Option(None, "--nics-per-host", "--rails",
                                     help="NICs per host (rails on rail fabrics) [default: one "
                                     "per GPU]; GPU i uses NIC i*nics/gpus."),
    hosts_per_leaf: int = typer.Option(16, "--hosts-per-leaf", help="Hosts under each leaf."),
    spines: int | None = typer.Option(None, "--spines", help="Spine switches (per pod on "
                                      "three_tier) [default: non-blocking]."),
    nic_gbps: float = typer.Option(400, "--nic-gbps", help="NIC speed in Gbit/s."),
    uplink_gbps: float | None = typer.Option(None, "--uplink-gbps", help="Leaf-spine link "
                                             "speed [default: non-blocking]."),
    dual_port: bool = typer.Option(False, "--dual-port", help="Each NIC has two ports on two "
                                   "leaves (same as the dual_port fabric; rail only)."),
    groups_per_pod: int = typer.Option(1, "--groups-per-pod", help="three_tier: leaf groups "
                                       "(of --hosts-per-leaf hosts) per pod."),
    cores_per_plane: int | None = typer.Option(None, "--cores-per-plane", help="three_tier: "
                                               "core switches per spine plane [default: "
                                               "non-blocking, leaves per pod]."),
    core_gbps: float | None = typer.Option(None, "--core-gbps", help="three_tier: spine-core "
                                           "link speed [default: non-blocking]."),
    output: Path = typer.Option(..., "--output", "-o", help="Write the topology JSON here."),
) -> None:
    """Write a generated topology as node-link JSON."""
    from c4.topology.fabrics import build_fabric
    from c4.topology.model import TopologyError

    fabric = {"single": "single_switch"}.get(kind, kind)
    if dual_port:
        if fabric not in ("rail", "dual_port"):
            raise typer.BadParameter(f"--dual-port is for rail fabrics, not {kind!r}; "
                                     "use the dual_port fabric")
        fabric = "dual_port"
    try:
        topo = build_fabric(fabric, hosts, gpus_per_host, nics_per_host=rails,
                            hosts_per_leaf=hosts_per_leaf, spines=spines, nic_gbps=nic_gbps,
                            uplink_gbps=uplink_gbps, groups_per_pod=groups_per_pod,
                            cores_per_plane=cores_per_plane, core_gbps=core_gbps)
    except TopologyError as exc:
        raise typer.BadParameter(str(exc)) from None
    topo.save(output)
    typer.echo(f"wrote {output}: {len(topo.hosts())} hosts, {len(topo.gpus())} GPUs, "
               f"{len(topo.nics())} NICs, {len(topo.switches())} switches, "
               f"{len(topo.links())} links")


@topology_app.command("show")
@with_client_security
def show(
    path: Path | None = typer.Argument(None, help="Topology JSON file (node-link)."),
    job: str | None = typer.Option(None, "--job", help="Instead of a file: the topology the "
                                   "daemon assembled for this job from its hosts' discovery "
                                   "and its --topology fabric, with each rank's GPU and NIC."),
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP),
    graph: bool = typer.Option(False, "--graph", help="With --job --format json: include the "
                               "node-link graph."),
    daemon: str | None = typer.Option(None, "--daemon", envvar="C4_DAEMON",
                                      help="Daemon address HOST:PORT (with --job)."),
) -> None:
    """Summarise a topology: counts by kind and tier, link speeds; or a job's, from the daemon."""
    from collections import Counter

    from rich.table import Table

    from c4.errors import C4Error
    from c4.output import emit, make_console
    from c4.topology import Topology

    if (path is None) == (job is None):
        raise typer.BadParameter("give a topology FILE or --job JOB (one of them)")
    if job is not None:
        _show_job(job, fmt, graph, daemon)
        return
    assert path is not None
    form = fmt
    try:
        topo = Topology.load(path)
    except C4Error as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    g = topo.graph
    rails = Counter(topo.rail(n) for n in topo.nics())
    tiers = Counter(g.nodes[s].get("tier") or "-" for s in topo.switches())
    speeds: Counter[tuple[str, float]] = Counter()
    for lk in topo.links():
        u, v = topo.endpoints(lk)
        pair = "-".join(sorted((_role(g, u), _role(g, v))))
        speeds[(pair, topo.capacity(lk))] += 1
    ix = topo.index
    paths = ("structural (two-tier)" if ix.two_tier else
             "structural (tiered)" if ix.tiered else "graph search")
    rows: list[dict[str, Any]] = [{"what": "hosts", "count": len(topo.hosts())},
            {"what": "gpus", "count": len(topo.gpus())},
            {"what": "nics", "count": sum(rails.values()),
             "rails": 0 if None in rails else len(rails)}]
    rows += [{"what": "switches", "tier": tier, "count": n} for tier, n in sorted(tiers.items())]
    rows += [{"what": "links", "between": pair, "gbps": gbps, "count": n}
             for (pair, gbps), n in sorted(speeds.items())]
    if form is Format.json:
        typer.echo(json.dumps({"topology": str(path), "summary": rows, "paths": paths},
                              indent=2))
        return
    if form is Format.jsonl:
        emit(form, "summary", rows)
        return
    table = Table(title=f"{path.name}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_column("detail")
    for r in rows:
        what = r["what"] if r["what"] not in ("switches", "links") else \
            f"switches ({r['tier']})" if r["what"] == "switches" else f"links {r['between']}"
        detail = f"{r['rails']} rails" if r.get("rails") else \
            f"{r['gbps']:g} Gbit/s" if "gbps" in r else ""
        table.add_row(what, str(r["count"]), detail)
    table.add_row("paths", "", paths)
    make_console().print(table)


def _show_job(job: str, fmt: Format, graph: bool, daemon: str | None) -> None:

    from c4.errors import C4Error
    from c4.topology.show import job_text
    from diagnosis.client import DaemonClient

    try:
        with DaemonClient(daemon) as client:
            obj = client.job_topology(job, with_graph=graph and fmt is not Format.table)
    except C4Error as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if fmt is Format.table:
        typer.echo(job_text(obj))
    else:
        emit_object(fmt, obj)


_SOURCES_HELP = ("ibnetdiscover, slurm (topology.conf/.yaml, scontrol show topology), scontrol, "
                 "aws, k8s (fabric); lldp, nvidia-smi, ibdev2netdev, host (a host's own outputs "
                 "or c4 topology discover JSON)")


@topology_app.command("import")
def import_(
    source: str = typer.Argument(..., help=f"What the files are: {_SOURCES_HELP}."),
    files: list[str] = typer.Argument(..., help="Input files. Host-layer outputs name no host: "
                                      "give them as HOST=FILE (or use --host)."),
    output: Path = typer.Option(..., "--output", "-o", help="Write the topology JSON here."),
    existing: Path | None = typer.Option(None, "--merge", help="An existing topology (e.g. an "
                                         "earlier import) to merge this source into."),
    host: str | None = typer.Option(None, "--host", help="The host of host-layer files given "
                                    "without HOST=."),
    name: str | None = typer.Option(None, "--name", help="topology.yaml: which topology to "
                                    "import (default: the cluster default)."),
    name_map: Path | None = typer.Option(None, "--name-map", help="ibnetdiscover: a "
                                         "--node-name-map file ('<guid> \"<name>\"' lines)."),
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP + " json: "
                               "counts and issues."),
) -> None:
    """Import the cluster's own description of itself into a node-link topology."""

    from c4.errors import C4Error
    from c4.topology.importers.sources import ImportOptions, run_import

    try:
        out = run_import(source, files, ImportOptions(host, name, name_map), existing)
    except C4Error as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    out.topology.save(output)
    issues = sorted(out.issues, key=lambda i: i.level != "warning")
    if fmt is not Format.table:
        emit_object(fmt, {"output": str(output), "counts": out.counts,
                          "warnings": sum(i.level == "warning" for i in issues),
                          "issues": [i.to_json() for i in issues]})
        return
    c = out.counts
    tiers = ", ".join(f"{n} {t}" for t, n in c["tiers"].items())
    typer.echo(f"wrote {output}: {c['hosts']} hosts, {c['gpus']} GPUs, {c['nics']} NICs, "
               f"{c['switches']} switches ({tiers or 'no tiers'}), {c['links']} links "
               f"({c['cables']} cables)")
    for issue in issues:
        typer.echo(f"{issue.level}: {issue}")


@topology_app.command("discover")
def discover(
    sysfs_root: Path = typer.Option(Path("/sys"), "--sysfs-root", help="Where sysfs is "
                                    "mounted (for a copy of another host's)."),
    host: str | None = typer.Option(None, "--host", help="This host's id in the topology "
                                    "(default: its short hostname)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the JSON here "
                                       "(default: print it)."),
    recorded: Path | None = typer.Option(None, "--from", help="Read the tools' saved outputs "
                                         "from this directory (nvidia-smi.txt, "
                                         "ibdev2netdev.txt, lldpctl.json) instead of running "
                                         "them, as the sidecar's --discover DIR does."),
) -> None:
    """Discover this host's GPUs, NICs, GPU-NIC pairing and switch ports, as JSON.

    Runs what the host has of nvidia-smi topo -m, ibdev2netdev, lldpctl; reads sysfs.
    """
    import json

    from c4.errors import C4Error
    from c4.topology.discover import discover_host, recorded_runner, run_command

    try:
        runner = run_command if recorded is None else recorded_runner(recorded)
    except C4Error as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    text = json.dumps(discover_host(runner, sysfs_root, hostname=host).to_json(), indent=1)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n")
        typer.echo(f"wrote {output}")


@topology_app.command("check")
def check(
    path: Path = typer.Argument(..., help="Topology JSON file (node-link)."),
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP),
    max_leaves: int = typer.Option(400, "--max-leaves", help="Compare the paths between every "
                                   "pair of leaves up to this many leaves (the exact test of "
                                   "which links no flow tells apart)."),
) -> None:
    """What c4 can and cannot localize on a topology.

    Components no transfer crosses or tells apart, hosts without pairing, parts unjoined.
    """

    from c4.errors import C4Error
    from c4.topology import Topology
    from c4.topology.check import check_topology

    try:
        result = check_topology(Topology.load(path), max_leaves=max_leaves)
    except C4Error as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if fmt is not Format.table:
        emit_object(fmt, result.to_json())
    else:
        typer.echo(result.to_text())


def _role(g: nx.Graph, node: str) -> str:
    d = g.nodes[node]
    return d.get("tier") or d["kind"] if d["kind"] == "switch" else d["kind"]


def register(app: typer.Typer) -> None:
    app.add_typer(topology_app, name="topology")
