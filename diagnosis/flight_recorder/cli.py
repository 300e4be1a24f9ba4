"""``c4 fr-analyze``: find who hung, mismatched or failed in PyTorch Flight Recorder dumps."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("fr-analyze", help="Analyse a directory of PyTorch Flight Recorder dumps (one "
                "file per rank, pickle or JSON, gloo or NCCL) and report the ranks that never "
                "joined a collective, called a different one, or failed.")(fr_analyze)


def fr_analyze(
    dumps: Path = typer.Argument(..., help="Directory holding one dump per rank, named "
                                 "<prefix><rank> (e.g. nccl_trace_rank_0)."),
    prefix: str = typer.Option(None, "--prefix", help="File-name prefix of the dumps, when the "
                               "directory holds several sets."),
    fmt: str = typer.Option("text", "--format", help="text, or json (shared specs section 3)."),
) -> None:
    from diagnosis.errors import DiagnosisError
    from diagnosis.flight_recorder import analyze_dumps
    from diagnosis.report import reports_to_json

    if fmt not in ("text", "json"):
        raise typer.BadParameter(f"--format must be text or json, not {fmt!r}")
    try:
        reports = analyze_dumps(dumps, prefix=prefix)
    except DiagnosisError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if fmt == "json":
        typer.echo(json.dumps(reports_to_json(reports), indent=2))
        return
    if not reports:
        typer.echo("no faults found: every rank reached the same calls")
        return
    for r in reports:
        who = ", ".join(f"rank {s.id} ({s.score:.2f})" for s in r.suspects)
        typer.echo(f"{r.kind}: {r.summary}\n  suspects: {who}")
