"""``c4 report JOB --html FILE``: the job's plots in one self-contained HTML page.

A command of the top layer: it joins what diagnosis knows of a job (from a daemon or a trace)
with what recovery did about it (the journal)."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
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

    if trace is None and not job:
        _fail("name the JOB (see `c4 jobs`), or give --trace FILE")
    try:
        with _progress():
            if trace is not None:
                data = from_trace(trace, job, topology=topology)
            else:
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


class _Elapsed(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self.t0 = time.monotonic()

    def format(self, record: logging.LogRecord) -> str:
        return f"c4 report: [{time.monotonic() - self.t0:5.1f} s] {record.getMessage()}"


@contextlib.contextmanager
def _progress() -> Iterator[None]:
    """The builder's steps on stderr as it goes (a large job's page takes seconds): its INFO
    records, whatever the root logger's level."""
    logger = logging.getLogger("diagnosis.report_html")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Elapsed())
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _fail(message: str) -> None:
    typer.echo(f"c4 report: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
