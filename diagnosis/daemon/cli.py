"""``c4 daemon``: run the central diagnosis daemon."""

from __future__ import annotations

import typer

from diagnosis.daemon.config import DEFAULT_ADDRESS


def daemon(
    listen: str = typer.Option(DEFAULT_ADDRESS, "--listen", envvar="C4_LISTEN",
                               help="HOST:PORT to serve gRPC on (loopback unless told otherwise)."),
    store: str = typer.Option("", "--store", envvar="C4_STORE",
                              help="sqlite:///PATH (default under ~/.local/share/c4) or "
                                   "clickhouse://USER:PASS@HOST:PORT/DB."),
    topology: str = typer.Option("", "--topology", envvar="C4_TOPOLOGY",
                                 help="Cluster topology file (node-link JSON) for localization."),
    analyze_interval: float = typer.Option(1.0, "--analyze-interval", envvar="C4_ANALYZE_INTERVAL",
                                           help="Seconds between runs of the live detectors."),
) -> None:
    """Run the diagnosis daemon: ingest telemetry, store it, detect faults, serve queries."""
    from diagnosis.daemon.config import DaemonConfig
    from diagnosis.daemon.server import serve
    from diagnosis.errors import DiagnosisError

    topo = None
    try:
        if topology:
            from diagnosis.topology import Topology

            topo = Topology.load(topology)
        config = DaemonConfig(listen=listen, store=store, analyze_interval_s=analyze_interval)
        serve(config, topology=topo, on_ready=lambda d: typer.echo(
            f"c4 daemon listening on {listen.rsplit(':', 1)[0]}:{d.port} (store {config.store})"))
    except (DiagnosisError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    app.command("daemon")(daemon)
