"""The ``c4`` command. Each part of c4 registers its own subcommands from its ``cli`` module;
heavy libraries are imported inside the commands so that ``c4 --help`` stays fast.

This package is the top layer: it may import every part, and it joins them where a command needs
two (``c4 report --html --journal``, the lab's launcher for ``c4 launch --lab``)."""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from recovery.launchers import Launcher

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
    "c4.cli.report",
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


def _lab_launcher(lab_dir: Path) -> Launcher:
    """``c4 launch --lab DIR``: the hosts of the fault lab in ``DIR`` (``c4 lab up``)."""
    from c4.lab.launch import LabLauncher

    return LabLauncher(lab_dir)


def build_app() -> typer.Typer:
    """The root app with every part's commands (registered once per process)."""
    global _registered
    if not _registered:
        for name in COMMAND_MODULES:
            importlib.import_module(name).register(app)
        from recovery.launchers import register_launcher

        register_launcher("lab", _lab_launcher)
        _registered = True
    return app


def main() -> None:
    build_app()(prog_name="c4")
