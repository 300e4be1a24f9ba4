"""``c4 run``: launch a training command with the collector installed in its Python processes.

It does not import torch: it only sets the environment and replaces itself with the command.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import typer


def run_environment(base: dict[str, str], job: str | None = None,
                    sidecar_socket: Path | None = None) -> dict[str, str]:
    """The environment for the launched command: site hook first on PYTHONPATH, C4_COLLECT=1."""
    from collectors.autoinstall import ENV_COLLECT, SITE_DIR
    from collectors.wire import SOCKET_ENV

    env = dict(base)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SITE_DIR)]
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *parts])
    env[ENV_COLLECT] = "1"
    if job:
        env["C4_JOB"] = job
    if sidecar_socket is not None:
        env[SOCKET_ENV] = str(sidecar_socket)
    return env


def run(
    command: list[str] = typer.Argument(
        ..., metavar="-- COMMAND...",
        help="The command to run, after `--`, e.g. `-- torchrun --nproc-per-node 8 train.py`."),
    job: str | None = typer.Option(
        None, "--job", help="Job name for the telemetry (sets C4_JOB; default: "
        "TORCHELASTIC_RUN_ID, else 'default')."),
    sidecar_socket: Path | None = typer.Option(
        None, "--sidecar-socket", help="Unix socket of the node's sidecar (sets "
        "C4_SIDECAR_SOCKET; default: $XDG_RUNTIME_DIR/c4/sidecar.sock or /tmp/c4/sidecar.sock)."),
    nccl_inspector: str | None = typer.Option(
        None, "--nccl-inspector", is_flag=False, flag_value="", metavar="[DIR]",
        help="Turn NCCL's Inspector on for the job (NCCL 2.28+), writing into DIR (give it as "
        "--nccl-inspector=DIR; default: nccl-inspector-<job> in the working directory): sets "
        "NCCL_INSPECTOR_ENABLE, a dump interval (without one it writes nothing), verbose "
        "timing, every call recorded."),
    nccl_plugin: str | None = typer.Option(
        None, "--nccl-profiler-plugin", metavar="PATH",
        help="With --nccl-inspector: the Inspector library (libnccl-profiler-inspector.so; "
        "default: found by name on the library path)."),
    collect: bool = typer.Option(True, "--collect/--no-collect", help="Install c4's hook on "
                                 "torch.distributed (off: NCCL's Inspector alone)."),
) -> None:
    """Run COMMAND with the c4 collector hooking torch.distributed in its Python processes.

    The training script needs no change: the collector installs itself when the program imports
    torch.distributed.

    Example: c4 run --job llama-7b -- torchrun --nproc-per-node 8 train.py
    """
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise typer.BadParameter("give the command to run after `--`", param_hint="COMMAND")
    env = run_environment(dict(os.environ), job, sidecar_socket) if collect else dict(os.environ)
    if nccl_inspector == "--":      # the flag without a value, then the command's "--"
        nccl_inspector = ""
    if nccl_inspector is not None:
        from diagnosis.nccl.inspector_env import inspector_environment

        for note in inspector_environment(env, nccl_inspector or None, nccl_plugin, job):
            typer.echo(f"c4 run: {note}", err=True)
        # made here, once: each process's Inspector creates it when missing, and those that
        # lose that race find it made, take it for an error and write nothing
        dump = Path(env["NCCL_INSPECTOR_DUMP_DIR"])
        try:
            dump.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            typer.echo(f"c4 run: cannot make the Inspector's dump directory {dump}: {exc}; "
                       "give --nccl-inspector=DIR a folder you can write", err=True)
            raise typer.Exit(2) from exc
    elif nccl_plugin is not None:
        raise typer.BadParameter("give it with --nccl-inspector",
                                 param_hint="--nccl-profiler-plugin")
    if shutil.which(command[0], path=env.get("PATH")) is None and os.sep not in command[0]:
        typer.echo(f"c4 run: command not found: {command[0]}", err=True)
        raise typer.Exit(127)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        typer.echo(f"c4 run: cannot run {command[0]}: {exc}", err=True)
        raise typer.Exit(126) from exc


RUN_HELP = (
    "Run COMMAND with the c4 collector hooking torch.distributed in its Python processes.\n\n"
    "The training script needs no change: the collector installs itself when the program "
    "imports torch.distributed.\n\n"
    "Example: c4 run --job llama-7b -- torchrun --nproc-per-node 8 train.py"
)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_interspersed_args": False}, help=RUN_HELP)(run)
