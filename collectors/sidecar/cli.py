"""``c4 sidecar``: run the node's sidecar. Its options are derived from the fields of
``SidecarConfig`` and its parts (flag, environment variable, help and default declared there
once); ``--token-file`` is the one option of the command alone."""

from __future__ import annotations

import inspect
from typing import Any

import typer

from c4.settings import build, derive_command
from collectors.sidecar.config import SidecarConfig

TOKEN_FILE = inspect.Parameter(
    "token_file", inspect.Parameter.KEYWORD_ONLY, annotation=str,
    default=typer.Option("", "--token-file", envvar="C4_TOKEN_FILE",
                         help="File holding a bearer token with the ingest role, if the daemon "
                              "checks tokens; or set C4_TOKEN."))


def config_from_options(options: dict[str, Any]) -> SidecarConfig:
    """The config from the parsed options of `c4 sidecar` (the token read from --token-file)."""
    from dataclasses import replace

    from c4.security.secret import read_token
    from collectors.sidecar.errors import SidecarConfigError

    token_file = options.pop("token_file")
    config = build(SidecarConfig, options, SidecarConfigError)
    config = replace(config, token=read_token(config.token, token_file))
    edge = config.edge
    if edge.health is not None and edge.health.sysfs_root != edge.sysfs_root:
        # one --sysfs-root for the ports and the health watch
        config = replace(config, edge=replace(edge, health=replace(edge.health,
                                                                   sysfs_root=edge.sysfs_root)))
    return config


def run_sidecar(**options: Any) -> None:
    """Run the per-node sidecar: take the local ranks' records and ship them to the daemon."""
    from c4.processes import stop_on_signals, wait_until
    from collectors.sidecar.errors import SidecarError
    from collectors.sidecar.sidecar import Sidecar

    # Handlers first: a SIGTERM while the sidecar starts (its socket already exists) must stop
    # it cleanly, not kill it.
    stop = stop_on_signals()
    try:
        config = config_from_options(options)
        car = Sidecar(config)
        car.start()
    except (ValueError, OSError, SidecarError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"c4 sidecar {car.id} listening on {config.socket_path}, daemon {config.daemon}")
    wait_until(stop)
    car.stop()
    s = car.stats()
    typer.echo(f"c4 sidecar stopped: received {s.received} records, shipped {s.shipped} "
               f"requests, dropped {s.dropped} records (counted by reason in its metrics), "
               f"{car.outbox.pending()} requests left in the log")


sidecar = derive_command(SidecarConfig, run_sidecar, [TOKEN_FILE])


def register(app: typer.Typer) -> None:
    app.command("sidecar")(sidecar)
