"""The ``c4`` command. Each part of c4 registers its own subcommands from its ``cli`` module;
heavy libraries are imported inside the commands so that ``c4 --help`` stays fast."""

from __future__ import annotations

import importlib
import logging
import os

import typer

# Modules with a ``register(app: typer.Typer) -> None`` function, in help order.
COMMAND_MODULES: list[str] = [
    "c4.demo.cli",
    "c4.lab.cli",
    "diagnosis.analyze.cli",
    "collectors.sidecar.cli",
    "collectors.cli",
    "collectors.health.cli",
    "diagnosis.daemon.cli",
    "diagnosis.probes.cli",
    "diagnosis.query_cli",
    "diagnosis.report_html.cli",
    "diagnosis.sim.cli",
    "diagnosis.topology_cli",
    "recovery.cli",
    "traffic_planner.cli",
]

app = typer.Typer(
    name="c4",
    help="Watch a training job's collective communication; find, report and recover from faults.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        import c4

        typer.echo(f"c4 {c4.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output."),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print c4's version and exit."),
) -> None:
    level = os.environ.get("C4_LOG_LEVEL") or ("DEBUG" if verbose > 1 else
                                               "INFO" if verbose else "WARNING")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


_registered = False


def build_app() -> typer.Typer:
    """The root app with every part's commands (registered once per process)."""
    global _registered
    if not _registered:
        for name in COMMAND_MODULES:
            importlib.import_module(name).register(app)
        _registered = True
    return app


def main() -> None:
    build_app()(prog_name="c4")
