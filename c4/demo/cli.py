"""``c4 demo``."""

from __future__ import annotations

import typer


def demo(
    steps: int = typer.Option(120, "--steps", help="Training steps of the demo job."),
    slow_rank: int = typer.Option(3, "--slow-rank", help="The rank made slow (-1: none)."),
    slow_ms: int = typer.Option(60, "--slow-ms", help="Extra compute per step on that rank."),
    keep: bool = typer.Option(False, "--keep", help="Keep logs and the database afterwards."),
) -> None:
    """Run the whole loop on this machine: daemon, sidecars, a real torchrun job with a planted
    fault, and what c4 finds."""
    from c4.demo.run import DemoConfig, run_demo

    raise typer.Exit(run_demo(DemoConfig(steps=steps, slow_rank=slow_rank, slow_ms=slow_ms,
                                         keep=keep)))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
