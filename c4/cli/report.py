"""``c4 report JOB --html FILE``: the job's plots in one self-contained HTML page.

A command of the top layer: it joins what diagnosis knows of a job (from a daemon or a trace)
with what recovery did about it (the journal)."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    job: str = typer.Argument(None, help="The job, from `c4 jobs` (with --trace: optional, "
                              "names the page; default the trace's own job name)."),
    html_out: Path = typer.Option(..., "--html", help="HTML file to write."),
    daemon: str = typer.Option(None, "--daemon", envvar="C4_DAEMON",
                               help="Daemon address HOST:PORT (default 127.0.0.1:7444)."),
    trace: Path | None = typer.Option(None, "--trace", exists=True, dir_okay=False,
                                      help="Read a trace file (JSON Lines) instead of asking "
                                      "a daemon: for offline use."),
    topology: Path | None = typer.Option(None, "--topology", exists=True, dir_okay=False,
                                         help="Topology (node-link JSON): draws it with the "
                                         "suspects highlighted."),
    journal: Path | None = typer.Option(None, "--journal", dir_okay=False,
                                        help="Recovery journal (SQLite, from `c4 recover`): "
                                        "adds the recoveries to the timeline."),
) -> None:
    """Write a self-contained HTML page of plots about a job: per-rank lateness over time,
    transfer rate per connection, the topology with its suspects, faults and recoveries."""
    from c4.errors import C4Error
    from diagnosis.report_html import from_daemon, from_trace, render
    from recovery.marks import recovery_marks

    try:
        if trace is not None:
            data = from_trace(trace, job, topology=topology)
        else:
            if not job:
                _fail("name the JOB (see `c4 jobs`), or give --trace FILE")
            data = from_daemon(job, daemon, topology=topology)
        if journal is not None:
            data.recoveries = recovery_marks(journal, data.job)
        page = render(data)
    except C4Error as exc:
        _fail(str(exc))
    try:
        html_out.write_text(page, encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot write {html_out}: {exc.strerror}")
    typer.echo(f"wrote the report of job {data.job} to {html_out} ({len(page) // 1024:,} KiB)")


def _fail(message: str) -> None:
    typer.echo(f"c4 report: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
