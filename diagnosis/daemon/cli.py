"""``c4 daemon``: run the central diagnosis daemon. Its options are derived from the fields of
``DaemonConfig`` (flag, environment variable, help and default declared there once)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from c4.settings import build, derive_command
from diagnosis.daemon.config import DaemonConfig

if TYPE_CHECKING:
    from diagnosis.daemon.server import Daemon


def run_daemon(**options: Any) -> None:
    """Run the diagnosis daemon: ingest telemetry, store it, detect faults, serve queries."""
    from c4.errors import C4Error
    from diagnosis.daemon.server import serve
    from diagnosis.errors import ConfigError

    try:
        config = build(DaemonConfig, options, ConfigError)
        topo = None
        if config.topology:
            from c4.topology import Topology

            topo = Topology.load(config.topology)

        def ready(d: Daemon) -> None:
            tls = "mutual TLS" if config.tls_client_ca else "TLS" if config.tls_cert \
                else "plaintext"
            typer.echo(f"c4 daemon listening on {config.listen.rsplit(':', 1)[0]}:{d.port} "
                       f"({tls}, {len(d.tokens) or 'no'} tokens, store {config.store})")
            if d.metrics_server is not None:
                m = d.metrics_server
                typer.echo(f"metrics on {m.scheme}://{m.host}:{m.port}/metrics")

        serve(config, topology=topo, on_ready=ready, topology_source=config.topology)
    except (C4Error, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


daemon = derive_command(DaemonConfig, run_daemon)


def register(app: typer.Typer) -> None:
    app.command("daemon")(daemon)
