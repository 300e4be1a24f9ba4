"""``c4 relay``: carry many sidecars' streams to the daemon over a few. Its options are derived
from the fields of ``RelayConfig``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from c4.settings import build, derive_command
from diagnosis.relay.config import RelayConfig

if TYPE_CHECKING:
    from diagnosis.relay.server import Relay


def run_relay(**options: Any) -> None:
    """Relay sidecars' ingest streams to the daemon: one relay per rack or row lets one daemon
    take more nodes than it has stream threads."""
    from c4.errors import C4Error
    from diagnosis.errors import ConfigError
    from diagnosis.relay.server import serve

    try:
        config = build(RelayConfig, options, ConfigError)

        def ready(r: Relay) -> None:
            tls = "mutual TLS" if config.tls_client_ca else "TLS" if config.tls_cert \
                else "plaintext"
            typer.echo(f"c4 relay listening on {config.listen.rsplit(':', 1)[0]}:{r.port} "
                       f"({tls}, {len(r.tokens) or 'no'} tokens), {config.upstreams} streams "
                       f"to the daemon at {config.daemon}")

        serve(config, on_ready=ready)
    except (C4Error, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


relay = derive_command(RelayConfig, run_relay)


def register(app: typer.Typer) -> None:
    app.command("relay")(relay)
