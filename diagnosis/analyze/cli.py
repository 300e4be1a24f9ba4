"""``c4 analyze``: stream a telemetry trace (or Flight Recorder dumps, or NCCL's own telemetry)
through the detectors and print the fault reports (shared specs section 3)."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from c4.output import Format
from diagnosis.chrome_trace_options import MAX_CALLS, SINCE, UNTIL

if TYPE_CHECKING:
    from diagnosis.trace.feed import FeedStats
    from diagnosis.trace.job import TraceJob


def analyze(
    trace: Path | None = typer.Argument(None, help="Telemetry trace: JSON Lines (c4's trace "
                                        "format, as `c4 export` writes it), version 1 or 2 or "
                                        "a mix of both, gzip-compressed if it ends in .gz.",
                                        exists=True, dir_okay=False),
    topology: Path | None = typer.Option(None, "--topology", "-t", exists=True, dir_okay=False,
                                         help="Topology (node-link JSON). Without it suspects "
                                         "are ranks, or hosts from the trace's rank records."),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="table, json "
                               "({\"reports\": [...]}) or jsonl (one report per line)."),
    flight_recorder: Path | None = typer.Option(None, "--flight-recorder", exists=True,
                                                file_okay=False, help="Analyze a directory of "
                                                "PyTorch Flight Recorder dumps instead of a "
                                                "trace."),
    prefix: str | None = typer.Option(None, "--prefix", help="With --flight-recorder: the file "
                                      "name prefix of the dumps to read (nccl_trace_rank_) when "
                                      "DIR holds several sets."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the output to this "
                                       "file instead of standard output."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=0, help="Processes parsing a "
                                    "large trace in parallel (0: none; default: CPUs - 1, at "
                                    "most 4; NCCL Inspector files: one per CPU)."),
    stopped_after: float | None = typer.Option(None, "--stopped-after", min=0.0, help="For a "
                                               "trace without an end record: recording "
                                               "stopped this many seconds after its last "
                                               "record (when the hung job was killed), so that "
                                               "calls still open then are judged as hangs."),
    nccl_inspector: list[Path] = typer.Option([], "--nccl-inspector", exists=True, help="NCCL "
                                              "Inspector output instead of a trace: a "
                                              "directory of <host>-pid<pid>.log (.jsonl, .gz) "
                                              "and .prom files, every node's (repeatable)."),
    ncclras: list[Path] = typer.Option([], "--ncclras", exists=True, dir_okay=False,
                                       help="ncclras output: status reports (text or -f json, "
                                       "one or several one after the other) or monitor events "
                                       "(repeatable)."),
    logs: list[str] = typer.Option([], "--logs", help="Job logs with NCCL_DEBUG lines and "
                                   "PyTorch watchdog lines: a file, a directory (every file "
                                   "in it) or a quoted glob (repeatable)."),
    nccl_profiler: list[Path] = typer.Option([], "--nccl-profiler", exists=True, dir_okay=False,
                                             help="NCCL profiler output: the example plugin's "
                                             "Chrome traces or CoMMA's latency files "
                                             "(repeatable)."),
    chrome_trace: Path | None = typer.Option(None, "--chrome-trace", dir_okay=False,
                                             help="Also write the TRACE's calls and the faults "
                                             "found as a Chrome trace-event JSON file (.gz: "
                                             "compressed) for Perfetto or chrome://tracing."),
    since: float | None = SINCE,
    until: float | None = UNTIL,
    max_calls: int | None = MAX_CALLS,
) -> None:
    """Find faults in a recorded job: hangs, slow ranks or hosts, slow or stuck links, errors.
    Every incident is listed: those still open at the trace's end and those that cleared
    before it (state "resolved" in JSON, with their onset and end).

    Traces of format version 2 (reduced telemetry: sampled calls, progress, linkstat and port
    records) are read like version 1; records of a type this c4 does not know are skipped with
    a warning. NCCL's telemetry (--nccl-inspector, --ncclras, --logs, --nccl-profiler, any mix)
    goes through the same detectors (see diagnosis/nccl/README.md).
    """
    from c4.errors import C4Error

    nccl = bool(nccl_inspector or ncclras or logs or nccl_profiler)
    if (trace is not None) + (flight_recorder is not None) + nccl != 1:
        _fail("give a TRACE file, --flight-recorder DIR, or NCCL's telemetry "
              "(--nccl-inspector DIR, --ncclras FILE, --logs FILE, --nccl-profiler FILE)")
    if stopped_after is not None and trace is None and not nccl:
        _fail("--stopped-after is about a TRACE file: Flight Recorder dumps need no end time")
    if chrome_trace is not None and trace is None:
        _fail("--chrome-trace draws the calls of a TRACE file: give one")
    if chrome_trace is None and (since is not None or until is not None or max_calls):
        _fail("--since, --until and --max-calls bound the --chrome-trace file: give it too")
    if prefix is not None and flight_recorder is None:
        _fail("--prefix selects Flight Recorder dumps: use it with --flight-recorder DIR")
    try:
        if nccl:
            reports = _nccl(nccl_inspector, ncclras, logs, nccl_profiler, topology, jobs,
                            None if stopped_after is None else int(stopped_after * 1e9))
        elif flight_recorder is not None:
            reports = _flight_recorder(flight_recorder, prefix)
        else:
            from diagnosis.trace.job import TraceJob

            assert trace is not None    # exactly one source was given, checked above

            # the records too, from the same read, when they are to be drawn
            kept = TraceJob() if chrome_trace is not None else None
            reports = _trace(trace, topology, jobs,
                             None if stopped_after is None else int(stopped_after * 1e9), kept)
            if kept is not None and chrome_trace is not None:
                _chrome(trace, kept, chrome_trace, reports, since, until, max_calls,
                        None if stopped_after is None else int(stopped_after * 1e9))
    except C4Error as exc:
        _fail(str(exc))
    _emit(reports, fmt, output)


def _fail(message: str) -> NoReturn:
    typer.echo(f"c4 analyze: {message}", err=True)
    raise typer.Exit(2)


def _chrome(trace: Path, tj: TraceJob, out: Path, reports: list, since: float | None,
            until: float | None, max_calls: int | None, stopped_after_ns: int | None) -> None:
    from diagnosis.chrome_trace import DEFAULT_MAX_CALLS, write_chrome_trace

    end = tj.end_ns
    if end is None and stopped_after_ns is not None and len(tj.ops):
        end = int(max(tj.ops["t_enter_ns"].max(), tj.ops["t_end_ns"].max())) + stopped_after_ns
    ct = write_chrome_trace(out, tj.job or trace.stem, tj.ops, reports, tj.hosts, gpus=tj.gpus,
                            end_ns=end, since_s=since, until_s=until,
                            max_calls=max_calls or DEFAULT_MAX_CALLS)
    for note in ct.notes:
        typer.echo(f"c4 analyze: note: {note}", err=True)
    # on stderr: the reports on standard output stay parseable
    typer.echo(f"wrote {ct.calls:,} of {ct.calls_total:,} calls ({ct.ranks:,} ranks on "
               f"{ct.hosts:,} hosts) and {ct.faults} fault(s) to {out} (Chrome trace: open it "
               "in Perfetto)", err=True)


def _flight_recorder(path: Path, prefix: str | None) -> list:
    from diagnosis.flight_recorder import analyze_dumps

    return analyze_dumps(Path(path), prefix)


def _nccl(inspector: list[Path], ras: list[Path], logs: list[str], profiler: list[Path],
          topology_path: Path | None, jobs: int | None, stopped_after_ns: int | None) -> list:
    from diagnosis.nccl.analyze import analyze_nccl, dropped_summary
    from diagnosis.nccl.sources import expand_paths, read_sources

    sources = read_sources(inspector, ras, expand_paths(logs), profiler, workers=jobs)
    topology = None
    if topology_path is not None:
        from c4.topology import Topology

        topology = Topology.load(topology_path)
    reports, stats = analyze_nccl(sources, topology, stopped_after_ns=stopped_after_ns)
    typer.echo(f"read {stats.ops_read:,} operations of {stats.ranks} ranks in {stats.groups} "
               f"communicators ({', '.join(f'{n} {k}' for k, n in stats.files.items())}); "
               f"{stats.ras_reports} RAS reports"
               + (f"; left out: {dropped_summary(stats)}" if stats.dropped else "")
               + (f"; bad input: {sources.problems.summary()}" if len(sources.problems) else ""),
               err=True)
    return reports


def _trace(trace: Path, topology_path: Path | None, jobs: int | None,
           stopped_after_ns: int | None, keep: TraceJob | None = None) -> list:
    from diagnosis.engine import Engine
    from diagnosis.trace.feed import feed_trace
    from diagnosis.trace.parallel import default_workers

    workers = default_workers() if jobs is None else jobs

    topology = None
    if topology_path is not None:
        from c4.topology import Topology

        topology = Topology.load(topology_path)
    engine = Engine(topology)
    # what start-up built (modules, the topology's graph) lives to the end: the collector need
    # not walk it at each full collection, here or in the parser processes forked from here
    gc.freeze()
    if not sys.stderr.isatty():
        _, stats = feed_trace(engine, trace, workers=workers, stopped_after_ns=stopped_after_ns,
                              keep=keep)
        return _with_health(engine.incidents(), stats)
    from rich.progress import BarColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task(f"analyzing {trace.name}", total=trace.stat().st_size)
        _, stats = feed_trace(engine, trace, progress=lambda n: bar.advance(task, n),
                              workers=workers, stopped_after_ns=stopped_after_ns, keep=keep)
    # a post-mortem lists every incident, also those that cleared before the trace ended
    return _with_health(engine.incidents(), stats)


def _with_health(reports: list, stats: FeedStats) -> list:
    """The trace's health records joined in: causes on the reports, health reports added."""
    if not stats.health:
        return reports
    from diagnosis.health.diagnose import explain

    return explain(reports, stats.health, rank_places=stats.places)


def _emit(reports: list, fmt: str, output: Path | None) -> None:
    from c4.report import reports_to_json

    if fmt in ("json", "jsonl"):
        text = json.dumps(reports_to_json(reports), indent=1) + "\n" if fmt == "json" else \
            "".join(json.dumps(r.to_json(), separators=(",", ":")) + "\n" for r in reports)
        if output is not None:
            output.write_text(text)
        else:
            sys.stdout.write(text)
        return
    from rich.console import Console
    from rich.table import Table

    from c4.output import make_console
    from diagnosis.engine.wording import call_words

    table = Table(title=f"{len(reports)} fault report(s)" if reports else "no faults found")
    for col in ("kind", "state", "onset (UTC)", "end (UTC)", "suspects", "where", "summary"):
        table.add_column(col, overflow="fold")
    for r in reports:
        suspects = ", ".join(f"{s.type} {s.id} ({s.score:.2f})" for s in r.suspects[:3])
        where = call_words(r.pg, r.seq)
        cleared = r.state != "open"
        summary = r.summary + "".join(f"\ncause: {c['target']}: {c['summary']}; "
                                      f"{c['action']}" for c in r.causes)
        table.add_row(r.kind, "cleared" if cleared else "open", _when(r.first_seen_ns),
                      _when(r.last_seen_ns) if cleared else "-", suspects, where, summary)
    if output is not None:
        with output.open("w") as fh:
            Console(file=fh, width=160).print(table)
    else:
        make_console().print(table)


def _when(ns: int) -> str:
    """A trace time as UTC wall-clock time, to the millisecond."""
    from datetime import datetime, timezone

    t = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
