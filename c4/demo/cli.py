"""``c4 demo``."""

from __future__ import annotations

import typer


def demo(
    local: bool = typer.Option(False, "--local", help="Use local processes even as root (no "
                                                      "network namespaces, process faults)."),
    keep: bool = typer.Option(False, "--keep", help="Keep logs, database and journal."),
) -> None:
    """The whole loop on this machine: a real torchrun job under c4 meets a slowdown and then a
    hang; c4 reports both, isolates the hung host and the job resumes from its last complete
    checkpoint. As root it runs in the fault lab (hosts as network namespaces, a real slow
    link); otherwise with local processes and process-level faults."""
    from c4.demo.scenario import DemoConfig, run_demo

    raise typer.Exit(run_demo(DemoConfig(local=local, keep=keep)))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
