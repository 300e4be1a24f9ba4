"""The ``c4`` command. Each part of c4 registers its own subcommands from its ``cli`` module;
heavy libraries are imported inside the commands so that ``c4 --help`` stays fast.

This package is the top layer: it may import every part, and it joins them where a command needs
two (``c4 report --html --journal``, the lab's launcher for ``c4 launch --lab``)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from recovery.launchers import Launcher

# Modules with a ``register(app: typer.Typer) -> None`` function, in help order, and the commands
# each registers: ``c4 NAME ...`` imports NAME's module alone, so a command does not start up
# slower for every other command's imports (tests/c4/test_cli_commands.py checks the names)
COMMANDS: dict[str, tuple[str, ...]] = {
    "c4.demo.cli": ("demo",),
    "c4.lab.cli": ("lab",),
    "diagnosis.analyze.cli": ("analyze",),
    "collectors.sidecar.cli": ("sidecar",),
    "collectors.cli": ("run",),
    "collectors.health.cli": ("health",),
    "diagnosis.daemon.cli": ("daemon",),
    "diagnosis.relay.cli": ("relay",),
    "diagnosis.probes.cli": ("probe",),
    "diagnosis.query_cli": ("status", "ops", "export", "faults", "jobs"),
    "c4.cli.report": ("report",),
    "diagnosis.sim.cli": ("sim",),
    "diagnosis.topology_cli": ("topology",),
    "recovery.cli": ("recover", "recoveries", "launch", "nodes"),
    "traffic_planner.cli": ("plan", "flows"),
}
COMMAND_MODULES: list[str] = list(COMMANDS)
_MODULE_OF = {name: module for module, names in COMMANDS.items() for name in names}

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


_registered: set[str] = set()


def _lab_launcher(lab_dir: Path) -> Launcher:
    """``c4 launch --lab DIR``: the hosts of the fault lab in ``DIR`` (``c4 lab up``)."""
    from c4.lab.launch import LabLauncher

    return LabLauncher(lab_dir)


def build_app(command: str | None = None) -> typer.Typer:
    """The root app with every part's commands, or with ``command``'s alone where it is one
    (each module registered once per process)."""
    module = _MODULE_OF.get(command) if command is not None else None
    for name in [module] if module else COMMAND_MODULES:
        if name not in _registered:
            importlib.import_module(name).register(app)
            _registered.add(name)
    if "recovery.cli" in _registered:
        from recovery.launchers import register_launcher

        register_launcher("lab", _lab_launcher)
    return app


def _command(args: list[str]) -> str | None:
    """The command of a command line: its first word that is not an option (c4's own options
    take no value); None where there is none (``c4 --help``, shell completion)."""
    return next((a for a in args if not a.startswith("-")), None)


def main() -> None:
    build_app(_command(sys.argv[1:]))(prog_name="c4")
