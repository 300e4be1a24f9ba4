"""``c4 faults``, ``c4 jobs``, ``c4 status``, ``c4 ops``: ask the daemon what it knows."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.table import Table

from c4.output import FORMAT_HELP, Format, emit, emit_object, message_json
from c4.output import make_console as _out
from c4.proto.codec import BatchError, collector_counts
from c4.security.cli import with_client_security as secured
from diagnosis.chrome_trace_options import MAX_CALLS, SINCE, UNTIL

if TYPE_CHECKING:
    from c4.proto.codec import Columns
    from c4.report import FaultReport
    from diagnosis.chrome_trace import ChromeTraceSummary
    from diagnosis.client import DaemonClient

DaemonOpt = typer.Option(None, "--daemon", envvar="C4_DAEMON",
                         help="Daemon address HOST:PORT (default 127.0.0.1:7444).")


FormatOpt = typer.Option(Format.table, "--format", help=FORMAT_HELP)

#: A sidecar not heard from for this long is shown as silent by ``c4 status``.
SIDECAR_SILENT_S = 30.0

faults_app = typer.Typer(help="List, show, watch, acknowledge and close fault reports.",
                         no_args_is_help=True)


def _client(address: str | None) -> DaemonClient:
    from diagnosis.client import DaemonClient

    return DaemonClient(address)


def _fail(exc: Exception) -> NoReturn:
    # on stderr: piped JSON stays JSON
    _out(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False, markup=True)
    raise typer.Exit(2)


def _when(ns: int) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _where(pg: str | None, seq: int | None) -> str:
    """Where in the job a report points: its process group and call, as far as known."""
    from diagnosis.engine.wording import call_words

    return f", in {call_words(pg, seq)}" if pg else ""


def _print_process(p: dict) -> None:
    """A blamed process: where it runs and what to run to look at it."""
    out = _out()
    out.print(f"\n[bold]rank {p.get('rank')}[/bold]: pid {p.get('pid')} on host "
              f"{p.get('host')}", highlight=False)
    if p.get("command"):
        out.print(f"  inspect: {p['command']}   (on {p.get('host')})", highlight=False)
    if p.get("stack"):
        out.print("  Python stack (py-spy):", highlight=False)
        out.print("\n".join("    " + line for line in p["stack"].splitlines()), highlight=False,
                  markup=False)
    elif p.get("stack_note"):
        out.print(f"  stack: {p['stack_note']}", highlight=False, markup=False)
    if p.get("flight_recorder"):
        out.print(f"  Flight Recorder: {p['flight_recorder']}", highlight=False, markup=False)


def _suspects(report: FaultReport) -> str:
    return ", ".join(f"{s.type} {s.id} ({s.score:.2f})" for s in report.suspects[:3]) or "-"


@faults_app.command("list")
@secured
def faults_list(
    job: str = typer.Option("", "--job", help="Only this job."),
    open_only: bool = typer.Option(False, "--open", help="Only faults still open."),
    limit: int = typer.Option(50, "--limit", help="At most this many, newest first (0: all)."),
    fmt: Format = FormatOpt,
    daemon: str = DaemonOpt,
) -> None:
    """Fault reports, newest first."""
    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            reports = c.faults(job, open_only=open_only, limit=limit)
    except C4Error as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit(fmt, "reports", (r.to_json() for r in reports))
        return
    _out().print(_faults_table(reports, title=f"{len(reports)} fault report(s)"))


def _state(r: FaultReport) -> str:
    return "acked" if r.state == "open" and r.evidence.get("ack") else r.state


def _faults_table(reports: Iterable[FaultReport], title: str | None = None) -> Table:
    table = Table(title=title)
    for col in ("id", "job", "kind", "state", "first seen (UTC)", "suspects", "summary"):
        table.add_column(col, overflow="fold")
    for r in reports:
        table.add_row(r.id, r.job, r.kind, _state(r), _when(r.first_seen_ns), _suspects(r),
                      r.summary)
    return table


@faults_app.command("show")
@secured
def faults_show(
    fault_id: str = typer.Argument(..., help="The id from `c4 faults list`."),
    fmt: Format = FormatOpt,
    daemon: str = DaemonOpt,
) -> None:
    """One fault report with its suspects and evidence."""
    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            r = c.fault(fault_id)
    except C4Error as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit_object(fmt, r.to_json())
        return
    _out().print(f"[bold]{r.kind}[/bold] in job {r.job} ({_state(r)}, revision {r.revision})")
    _out().print(r.summary, highlight=False, markup=False)
    _out().print(f"first seen {_when(r.first_seen_ns)}, last seen {_when(r.last_seen_ns)}"
                 + _where(r.pg, r.seq), highlight=False)
    table = Table(title="suspects")
    for col in ("type", "id", "rank", "score"):
        table.add_column(col)
    for s in r.suspects:
        table.add_row(s.type, s.id, "-" if s.rank is None else str(s.rank), f"{s.score:.3f}")
    _out().print(table)
    if r.causes:
        causes = Table(title="causes (node health over the fault's window)")
        for col in ("on", "cause", "since (UTC)", "what to do"):
            causes.add_column(col, overflow="fold")
        for cause in r.causes:
            causes.add_row(cause["target"], cause["summary"], _when(cause["since_ns"]),
                           cause["action"])
        _out().print(causes)
    ack, resolution = r.evidence.get("ack"), r.evidence.get("resolution")
    if ack:
        _out().print(f"acknowledged by {ack.get('by')} at {_when(ack.get('at_ns', 0))}"
                     + (f": {ack['note']}" if ack.get("note") else ""), highlight=False,
                     markup=False)
    if resolution:
        _out().print(f"resolved at {_when(resolution.get('at_ns', 0))}: "
                     f"{resolution.get('reason')}", highlight=False, markup=False)
    elif r.state != "open" and r.evidence.get("resolved"):
        # the detectors' own reason (the waiting call finished, no longer slow, ...)
        _out().print(f"resolved at {_when(r.last_seen_ns)}: {r.evidence['resolved']}",
                     highlight=False, markup=False)
    processes = r.evidence.get("processes") or []
    for p in processes:
        _print_process(p)
    evidence = {k: v for k, v in r.to_json()["evidence"].items()
                if k not in ("processes", "ack", "resolution", "resolved")}
    if evidence:
        _out().print_json(json.dumps(evidence))


def _who() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "someone"


ByOpt = typer.Option(None, "--by", help="Who (default: your user name).")
NoteOpt = typer.Option("", "--note", "-m", help="Why, for the next person on call.")


@faults_app.command("ack")
@secured
def faults_ack(
    fault_id: str = typer.Argument(..., help="The id from `c4 faults list`."),
    by: str = ByOpt, note: str = NoteOpt, daemon: str = DaemonOpt,
) -> None:
    """Acknowledge a fault: someone is on it. It stays open (needs the act role)."""
    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            r = c.ack(fault_id, by or _who(), note)
    except C4Error as exc:
        _fail(exc)
    _out().print(f"fault {r.id} ({r.kind}, job {r.job}) acknowledged by "
                 f"{r.evidence['ack']['by']}", highlight=False, markup=False)


@faults_app.command("close")
@secured
def faults_close(
    fault_id: str = typer.Argument(..., help="The id from `c4 faults list`."),
    by: str = ByOpt, note: str = NoteOpt, daemon: str = DaemonOpt,
) -> None:
    """Close a fault with your reason: it is resolved, and later updates from the detectors
    do not reopen it (needs the act role)."""
    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            r = c.close_fault(fault_id, by or _who(), note)
    except C4Error as exc:
        _fail(exc)
    reason = (r.evidence.get("resolution") or {}).get("reason", r.state)
    _out().print(f"fault {r.id} ({r.kind}, job {r.job}) {r.state}: {reason}",
                 highlight=False, markup=False)


@faults_app.command("watch")
@secured
def faults_watch(
    job: str = typer.Option("", "--job", help="Only this job."),
    include_open: bool = typer.Option(True, "--open/--new-only",
                                      help="First the faults open now, then every change."),
    fmt: Format = typer.Option(Format.table, "--format",
                               help="table (one line per change) or jsonl (one report per "
                                    "line)."),
    daemon: str = DaemonOpt,
) -> None:
    """Follow fault reports as the daemon files, revises and resolves them (Ctrl-C stops)."""
    from c4.errors import C4Error

    if fmt is Format.json:
        raise typer.BadParameter("a stream has no single JSON document: use --format jsonl",
                                 param_hint="--format")
    try:
        with _client(daemon) as c:
            for r in c.watch(job, include_open=include_open):
                if fmt is Format.jsonl:
                    typer.echo(json.dumps(r.to_json(), separators=(",", ":")))
                else:
                    typer.echo(f"{_when(r.last_seen_ns or r.first_seen_ns)}  {r.id}  "
                               f"{r.job}  {r.kind}  {_state(r)}  rev {r.revision}  "
                               f"{_suspects(r)}  {r.summary}")
    except KeyboardInterrupt:
        return
    except C4Error as exc:
        _fail(exc)


jobs_app = typer.Typer(help="Jobs the daemon has seen (`c4 jobs`), and removing one "
                       "(`c4 jobs rm`).", invoke_without_command=True)


@jobs_app.command("rm")
@secured
def jobs_rm(
    job: list[str] = typer.Argument(..., help="The job(s) to remove, from `c4 jobs`."),
    daemon: str = DaemonOpt,
) -> None:
    """Remove jobs: every attempt's records and the jobs' fault reports, from the store and
    the live view. Their sidecars' further records are refused until a rank registers again.
    Needs a token with the admin role where the daemon checks tokens."""
    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            for name in job:
                r = c.remove_job(name)
                if r.attempts:
                    _out().print(f"removed job {r.job}: {r.attempts} attempt(s), {r.faults} "
                                 "fault report(s)")
                else:
                    _out().print(f"job {r.job} is not stored: nothing to remove")
    except C4Error as exc:
        _fail(exc)


@jobs_app.callback()
@secured
def _jobs_default(ctx: typer.Context, daemon: str = DaemonOpt, fmt: Format = FormatOpt) -> None:
    """Jobs the daemon has seen: running, silent, finished or failed, with their ranks,
    records and open faults."""
    if ctx.invoked_subcommand is None:
        jobs(daemon=daemon, fmt=fmt)


def jobs(daemon: str = DaemonOpt, fmt: Format = FormatOpt) -> None:
    """Jobs the daemon has seen: running, silent, finished or failed, with their ranks,
    records and open faults."""
    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            found = c.jobs()
    except C4Error as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit(fmt, "jobs", (message_json(j) for j in found))
        return
    table = Table(title=f"{len(found)} job(s)")
    for col in ("job", "state", "attempt", "ranks", "hosts", "records", "first (UTC)",
                "last (UTC)", "open faults", "ended"):
        table.add_column(col)
    for j in found:
        ended = f"{_when(j.ended_ns)}: {j.end_reason}" if j.ended_ns else j.end_reason or "-"
        table.add_row(j.job, j.state or "unknown", str(j.attempt),
                      f"{j.ranks_seen}/{j.world_size}", ",".join(j.hosts), f"{j.ops:,}",
                      _when(j.first_ns), _when(j.last_ns), str(j.open_faults), ended)
    _out().print(table)


def status(daemon: str = DaemonOpt, fmt: Format = FormatOpt) -> None:
    """Daemon health, ingest rate and the sidecars it hears from."""
    import time

    from c4.errors import C4Error

    try:
        with _client(daemon) as c:
            s = c.status()
    except C4Error as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit_object(fmt, message_json(s))
        return
    up = (time.time_ns() - s.started_ns) / 1e9
    faults = f"{s.open_faults} open fault(s)" if not s.store_error else "open faults unknown"
    out = _out()
    out.print(f"c4 daemon {s.version}: up {up:.0f} s, store {s.store}, {s.jobs} job(s) "
              f"({s.live_jobs} live), {faults}")
    if s.store_error:
        out.print(f"[red]store unavailable:[/red] {s.store_error} (ingest waits for it; what "
                  "is shown comes from the daemon's memory)", highlight=False, markup=True)
    if s.job_problems:
        out.print(f"{s.job_problems} failure(s) inside single jobs' live analysis (other jobs "
                  "unaffected; see the daemon's log)")
    out.print(f"{s.ingest_streams} ingest stream(s), {s.watches} fault watch(es) open")
    _out().print(f"ingested {s.records_ingested:,} records, {s.records_per_second:,.0f}/s "
                  f"over the last minute; {s.batches_rejected} rejected, "
                  f"{s.duplicates} duplicates")
    table = Table(title=f"{len(s.sidecars)} sidecar(s)")
    for col in ("sidecar", "host", "state", "last seen (s ago)", "received", "shipped",
                "spilled", "dropped", "collector drops"):
        table.add_column(col)
    for sc in s.sidecars:
        st = sc.stats
        ago = (time.time_ns() - sc.last_seen_ns) / 1e9
        try:
            drops = sum(int(cols["dropped"].sum()) for _, _, cols in collector_counts(st))
        except BatchError:   # refused by the daemon when it came
            drops = 0
        # sidecars send statistics every few seconds: one quiet for longer is gone or cut off
        state = "silent" if ago > SIDECAR_SILENT_S else "dropping" if drops or st.dropped \
            else "ok"
        table.add_row(sc.sidecar, sc.host, state, f"{ago:.1f}", str(st.received),
                      str(st.shipped), str(st.spilled), str(st.dropped), str(drops))
    _out().print(table)


def ops(
    job: str = typer.Argument(..., help="The job, from `c4 jobs`."),
    rank: int = typer.Option(-1, "--rank", help="Only this rank (-1: all)."),
    pg: str = typer.Option("", "--pg", help="Only this process group."),
    limit: int = typer.Option(50, "--limit", help="At most this many rows (0: all)."),
    fmt: Format = typer.Option(Format.table, "--format",
                               help="table, json ({\"ops\": [...]}) or jsonl (the op records "
                                    "of the trace format, one per line)."),
    daemon: str = DaemonOpt,
) -> None:
    """The stored collective and point-to-point calls of a job, one row per call."""
    from c4.errors import C4Error
    from c4.proto.codec import STATUS_NAMES

    try:
        with _client(daemon) as c:
            cols = c.ops(job, rank=rank, pg=pg, limit=limit)
    except C4Error as exc:
        _fail(exc)
    if fmt is Format.jsonl:
        import sys

        from diagnosis.trace.writer import TraceWriter

        with TraceWriter(sys.stdout.buffer) as out:
            out.ops(cols)
        return
    names = cols.strings
    rows = zip(*(cols[k].tolist() for k in ("rank", "pg", "seq", "op", "nbytes", "dtype",
                                             "t_enter_ns", "t_end_ns", "status", "peer")))
    if fmt is Format.json:
        emit(fmt, "ops", ({"rank": r, "pg": names[g], "seq": q, "op": names[o], "nbytes": b,
                           "t_enter_ns": te, "t_end_ns": tx, "status": STATUS_NAMES[st],
                           "peer": p} for r, g, q, o, b, _d, te, tx, st, p in rows))
        return
    table = Table(title=f"{len(cols)} call(s) of job {job}")
    for col in ("rank", "pg", "seq", "op", "bytes", "peer", "enter (UTC)", "duration ms",
                "status"):
        table.add_column(col)
    for r, g, q, o, b, _d, te, tx, st, p in rows:
        table.add_row(str(r), names[g], str(q), names[o], f"{b:,}", "-" if p < 0 else str(p),
                      _when(te), "open" if tx < 0 else f"{(tx - te) / 1e6:.3f}",
                      STATUS_NAMES[st])
    _out().print(table)


def _recording_stopped(client: DaemonClient, job: str) -> int:
    """When the daemon stopped hearing about a job: its end, now for a job still running or
    hung, else the last time a report of it was revised (a hang's report is revised while it
    lasts)."""
    import time

    summary = next((j for j in client.jobs() if j.job == job), None)
    if summary is not None and summary.ended_ns:
        return int(summary.ended_ns)
    if summary is not None and summary.state in ("running", "silent"):
        return time.time_ns()
    return max((r.last_seen_ns for r in client.faults(job)), default=0)


def export(
    job: str = typer.Argument(..., help="The job, from `c4 jobs`."),
    output: str | None = typer.Option(None, "--output", "-o",
                                      help="Trace file to write (JSON Lines, c4's format)."),
    full: bool = typer.Option(False, "--full",
                              help="Also the full records the nodes sent around the job's "
                                   "fault reports (jobs whose calls were sampled)."),
    chrome_trace: str | None = typer.Option(None, "--chrome-trace", help="Also (or only) "
                                            "write the job's calls and faults as a Chrome "
                                            "trace-event JSON file (.gz: compressed), for "
                                            "Perfetto (ui.perfetto.dev) or chrome://tracing."),
    since: float | None = SINCE,
    until: float | None = UNTIL,
    max_calls: int | None = MAX_CALLS,
    fmt: Format = typer.Option(Format.table, "--format", help="table (a sentence per file "
                               "written), json (one object: {\"trace\": {...}, "
                               "\"chrome_trace\": {...}}, what each file holds) or jsonl "
                               "(that object on one line)."),
    daemon: str = DaemonOpt,
) -> None:
    """Write a job's stored telemetry as a trace file (c4's JSON Lines trace format), for
    `c4 analyze` or another tool: version 1, or version 2 with its sampling factor and its
    progress, linkstat and port records when the job shipped reduced telemetry. With
    --chrome-trace, its calls and faults as a timeline for Perfetto: one process per host, one
    thread per rank."""
    from c4.errors import C4Error
    from diagnosis.errors import DiagnosisError
    from diagnosis.export import write_trace

    if output is None and chrome_trace is None:
        _fail(DiagnosisError("give --output FILE (c4's trace format) or --chrome-trace FILE "
                             "(a timeline for Perfetto), or both"))
    if chrome_trace is None and (since is not None or until is not None):
        _fail(DiagnosisError("--since and --until bound the --chrome-trace file: give it too"))
    try:
        with _client(daemon) as c:
            ranks, groups, cols = c.ranks(job), c.groups(job), c.ops(job)
            reduced = c.reduced(job) if output is not None else []
            details = c.details(job) if full and output is not None else None
            faults = c.faults(job) if chrome_trace is not None else []
            stopped = _recording_stopped(c, job)
    except C4Error as exc:
        _fail(exc)
    if not len(cols) and not ranks:
        _fail(DiagnosisError(f"the daemon knows nothing of job {job!r}: `c4 jobs` lists the "
                             "jobs it has seen"))
    written: dict[str, Any] = {"job": job}
    if output is not None:
        out = write_trace(output, job, ranks=ranks, groups=groups, ops=cols, reduced=reduced,
                          details=details, stopped_ns=stopped)
        written["trace"] = {"path": output, **asdict(out)}
    if chrome_trace is not None:
        ct = _write_chrome(chrome_trace, job, cols, faults, {r.rank: r.host for r in ranks},
                           {r.rank: r.gpu for r in ranks if r.gpu}, stopped, since, until,
                           max_calls)
        written["chrome_trace"] = {"path": chrome_trace, **asdict(ct)}
    if fmt is not Format.table:
        emit_object(fmt, written)
        return
    if output is not None:
        what = f"version {out.version}" + (f", sample {out.sample}" if out.sample > 1 else "")
        extra = f", {out.detail_ops:,} of them full records around reports" if full else ""
        _out().print(f"wrote {out.lines:,} records of job {job} to {output} ({what}{extra})")
        if out.insane:
            _out().print(f"left out {out.insane:,} records whose times or values c4 analyze "
                         "could not use (stored before the daemon checked them)")
    if chrome_trace is not None:
        _out().print(f"wrote {ct.calls:,} of {ct.calls_total:,} calls ({ct.ranks:,} ranks on "
                     f"{ct.hosts:,} hosts, {ct.window_s[0]:.3f} s to {ct.window_s[1]:.3f} s) "
                     f"and {ct.faults} fault(s) of job {job} to {chrome_trace} (Chrome trace: "
                     "open it in Perfetto)", highlight=False)


def _write_chrome(path: str, job: str, cols: Columns, faults: Iterable[FaultReport],
                  hosts: dict[int, str], gpus: dict[int, str], stopped: int, since: float | None,
                  until: float | None, max_calls: int | None) -> ChromeTraceSummary:
    from c4.errors import C4Error
    from diagnosis.chrome_trace import DEFAULT_MAX_CALLS, write_chrome_trace

    try:
        ct = write_chrome_trace(path, job, cols, faults, hosts, gpus=gpus, end_ns=stopped,
                                since_s=since, until_s=until,
                                max_calls=max_calls or DEFAULT_MAX_CALLS)
    except C4Error as exc:
        _fail(exc)
    for note in ct.notes:
        _out(stderr=True).print(f"[yellow]note:[/yellow] {note}", highlight=False)
    return ct


def register(app: typer.Typer) -> None:
    app.add_typer(faults_app, name="faults")
    app.add_typer(jobs_app, name="jobs")
    app.command("status")(secured(status))
    app.command("ops")(secured(ops))
    app.command("export")(secured(export))
