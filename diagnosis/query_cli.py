"""``c4 faults``, ``c4 jobs``, ``c4 status``, ``c4 ops``: ask the daemon what it knows."""

from __future__ import annotations

import datetime as dt
import json
from enum import Enum

import typer
from rich.console import Console
from rich.table import Table

from diagnosis.security.cli import with_client_security as secured

DaemonOpt = typer.Option(None, "--daemon", envvar="C4_DAEMON",
                         help="Daemon address HOST:PORT (default 127.0.0.1:7444).")


class Fmt(str, Enum):
    table = "table"
    json = "json"


faults_app = typer.Typer(help="List and show fault reports.", no_args_is_help=True)
console = Console()


def _client(address: str | None):
    from diagnosis.client import DaemonClient

    return DaemonClient(address)


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {exc}", highlight=False)
    raise typer.Exit(2)


def _when(ns: int) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _suspects(report) -> str:
    return ", ".join(f"{s.type} {s.id} ({s.score:.2f})" for s in report.suspects[:3]) or "-"


@faults_app.command("list")
@secured
def faults_list(
    job: str = typer.Option("", "--job", help="Only this job."),
    open_only: bool = typer.Option(False, "--open", help="Only faults still open."),
    limit: int = typer.Option(50, "--limit", help="At most this many, newest first (0: all)."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help="table or json."),
    daemon: str = DaemonOpt,
) -> None:
    """Fault reports, newest first."""
    from diagnosis.errors import DiagnosisError

    try:
        with _client(daemon) as c:
            reports = c.faults(job, open_only=open_only, limit=limit)
    except DiagnosisError as exc:
        _fail(exc)
    if fmt is Fmt.json:
        typer.echo(json.dumps({"reports": [r.to_json() for r in reports]}, indent=2))
        return
    table = Table(title=f"{len(reports)} fault report(s)")
    for col in ("id", "job", "kind", "state", "first seen (UTC)", "suspects", "summary"):
        table.add_column(col, overflow="fold")
    for r in reports:
        table.add_row(r.id, r.job, r.kind, r.state, _when(r.first_seen_ns), _suspects(r),
                      r.summary)
    console.print(table)


@faults_app.command("show")
@secured
def faults_show(
    fault_id: str = typer.Argument(..., help="The id from `c4 faults list`."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help="table or json."),
    daemon: str = DaemonOpt,
) -> None:
    """One fault report with its suspects and evidence."""
    from diagnosis.errors import DiagnosisError

    try:
        with _client(daemon) as c:
            r = c.fault(fault_id)
    except DiagnosisError as exc:
        _fail(exc)
    if fmt is Fmt.json:
        typer.echo(json.dumps(r.to_json(), indent=2))
        return
    console.print(f"[bold]{r.kind}[/bold] in job {r.job} ({r.state}, revision {r.revision})")
    console.print(r.summary)
    console.print(f"first seen {_when(r.first_seen_ns)}, last seen {_when(r.last_seen_ns)}"
                  + (f", at {r.pg} #{r.seq}" if r.pg else ""))
    table = Table(title="suspects")
    for col in ("type", "id", "rank", "score"):
        table.add_column(col)
    for s in r.suspects:
        table.add_row(s.type, s.id, "-" if s.rank is None else str(s.rank), f"{s.score:.3f}")
    console.print(table)
    if r.evidence:
        console.print_json(json.dumps(r.to_json()["evidence"]))


def jobs(daemon: str = DaemonOpt,
         fmt: Fmt = typer.Option(Fmt.table, "--format", help="table or json.")) -> None:
    """Jobs the daemon has seen, with their ranks, records and open faults."""
    from google.protobuf.json_format import MessageToDict

    from diagnosis.errors import DiagnosisError

    try:
        with _client(daemon) as c:
            found = c.jobs()
    except DiagnosisError as exc:
        _fail(exc)
    if fmt is Fmt.json:
        typer.echo(json.dumps([MessageToDict(j, preserving_proto_field_name=True)
                               for j in found], indent=2))
        return
    table = Table(title=f"{len(found)} job(s)")
    for col in ("job", "attempt", "ranks", "hosts", "records", "first (UTC)", "last (UTC)",
                "open faults"):
        table.add_column(col)
    for j in found:
        table.add_row(j.job, str(j.attempt), f"{j.ranks_seen}/{j.world_size}",
                      ",".join(j.hosts), f"{j.ops:,}", _when(j.first_ns), _when(j.last_ns),
                      str(j.open_faults))
    console.print(table)


def status(daemon: str = DaemonOpt,
           fmt: Fmt = typer.Option(Fmt.table, "--format", help="table or json.")) -> None:
    """Daemon health, ingest rate and the sidecars it hears from."""
    import time

    from google.protobuf.json_format import MessageToDict

    from diagnosis.errors import DiagnosisError

    try:
        with _client(daemon) as c:
            s = c.status()
    except DiagnosisError as exc:
        _fail(exc)
    if fmt is Fmt.json:
        typer.echo(json.dumps(MessageToDict(s, preserving_proto_field_name=True), indent=2))
        return
    up = (time.time_ns() - s.started_ns) / 1e9
    console.print(f"c4 daemon {s.version}: up {up:.0f} s, store {s.store}, {s.jobs} job(s), "
                  f"{s.open_faults} open fault(s)")
    console.print(f"ingested {s.records_ingested:,} records, {s.records_per_second:,.0f}/s "
                  f"over the last minute; {s.batches_rejected} rejected, "
                  f"{s.duplicates} duplicates")
    table = Table(title=f"{len(s.sidecars)} sidecar(s)")
    for col in ("sidecar", "host", "last seen (s ago)", "received", "shipped", "spilled",
                "dropped", "collector drops"):
        table.add_column(col)
    for sc in s.sidecars:
        st = sc.stats
        table.add_row(sc.sidecar, sc.host, f"{(time.time_ns() - sc.last_seen_ns) / 1e9:.1f}",
                      str(st.received), str(st.shipped), str(st.spilled), str(st.dropped),
                      str(sum(c.dropped for c in st.collectors)))
    console.print(table)


def ops(
    job: str = typer.Argument(..., help="The job, from `c4 jobs`."),
    rank: int = typer.Option(-1, "--rank", help="Only this rank (-1: all)."),
    pg: str = typer.Option("", "--pg", help="Only this process group."),
    limit: int = typer.Option(50, "--limit", help="At most this many rows (0: all)."),
    fmt: Fmt = typer.Option(Fmt.table, "--format",
                            help="table or json (JSON Lines, trace format)."),
    daemon: str = DaemonOpt,
) -> None:
    """The stored collective and point-to-point calls of a job, one row per call."""
    from diagnosis.errors import DiagnosisError
    from proto.codec import STATUS_NAMES

    try:
        with _client(daemon) as c:
            cols = c.ops(job, rank=rank, pg=pg, limit=limit)
    except DiagnosisError as exc:
        _fail(exc)
    if fmt is Fmt.json:
        import sys

        from diagnosis.trace.writer import TraceWriter

        with TraceWriter(sys.stdout.buffer) as out:
            out.ops(cols)
        return
    names = cols.strings
    rows = zip(*(cols[k].tolist() for k in ("rank", "pg", "seq", "op", "nbytes", "dtype",
                                             "t_enter_ns", "t_end_ns", "status", "peer")))
    table = Table(title=f"{len(cols)} call(s) of job {job}")
    for col in ("rank", "pg", "seq", "op", "bytes", "peer", "enter (UTC)", "duration ms",
                "status"):
        table.add_column(col)
    for r, g, q, o, b, _d, te, tx, st, p in rows:
        table.add_row(str(r), names[g], str(q), names[o], f"{b:,}", "-" if p < 0 else str(p),
                      _when(te), "open" if tx < 0 else f"{(tx - te) / 1e6:.3f}",
                      STATUS_NAMES[st])
    console.print(table)


def export(
    job: str = typer.Argument(..., help="The job, from `c4 jobs`."),
    output: str = typer.Option(..., "--output", "-o", help="Trace file to write (JSON Lines)."),
    full: bool = typer.Option(False, "--full",
                              help="Also the full records the nodes sent around the job's "
                                   "fault reports (jobs whose calls were sampled)."),
    daemon: str = DaemonOpt,
) -> None:
    """Write a job's stored telemetry as a trace file (shared formats, section 2), for
    `c4 analyze` or another tool: version 1, or version 2 with its sampling factor and its
    progress, linkstat and port records when the job shipped reduced telemetry."""
    from diagnosis.errors import DiagnosisError
    from diagnosis.export import write_trace

    try:
        with _client(daemon) as c:
            ranks, groups, cols = c.ranks(job), c.groups(job), c.ops(job)
            reduced = c.reduced(job)
            details = c.details(job) if full else None
    except DiagnosisError as exc:
        _fail(exc)
    out = write_trace(output, job, ranks=ranks, groups=groups, ops=cols, reduced=reduced,
                      details=details)
    what = f"version {out.version}" + (f", sample {out.sample}" if out.sample > 1 else "")
    extra = f", {out.detail_ops:,} of them full records around reports" if full else ""
    console.print(f"wrote {out.lines:,} records of job {job} to {output} ({what}{extra})")


def register(app: typer.Typer) -> None:
    app.add_typer(faults_app, name="faults")
    app.command("jobs")(secured(jobs))
    app.command("status")(secured(status))
    app.command("ops")(secured(ops))
    app.command("export")(secured(export))
