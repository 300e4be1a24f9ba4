"""``c4 recover``, ``c4 recoveries``, ``c4 nodes``, ``c4 launch``: the recovery commands."""

from __future__ import annotations

import datetime as dt
import inspect
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from c4.output import FORMAT_HELP, Format, emit, emit_object
from c4.output import make_console as _out

if TYPE_CHECKING:
    from recovery.isolation.api import Isolator
    from recovery.journal import Journal

JournalOpt = typer.Option(None, "--journal", envvar="C4_RECOVERY_JOURNAL",
                          help="Recovery journal (SQLite) shared by c4 recover, c4 launch and "
                               "these commands (default: the user's state directory).")
IsolatorOpt = typer.Option("blocklist", "--isolator", envvar="C4_ISOLATOR",
                           help="Isolation backend: blocklist[:PATH] (default), slurm, "
                                "kubernetes[:NAMESPACE].")
DaemonOpt = typer.Option(None, "--daemon", envvar="C4_DAEMON",
                         help="Daemon address HOST:PORT (default 127.0.0.1:7444).")

nodes_app = typer.Typer(help="Isolated nodes: list them, isolate one by hand, release one.",
                        no_args_is_help=True)


def _fail(exc: Exception) -> None:
    # on stderr: piped JSON stays JSON
    _out(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
    raise typer.Exit(2)


def _journal(path: Path | None) -> Journal:
    from recovery.journal import Journal, default_journal_path

    return Journal(path or default_journal_path())


def _isolator(spec: str) -> Isolator:
    from recovery.isolation import open_isolator

    return open_isolator(spec)


def _when(ns: int | None) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _param(name: str, option: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                             annotation=annotation)


#: the options of ``c4 recover`` besides its settings (``recovery.config.RecoverConfig``)
RECOVER_EXTRA = [
    _param("daemon", DaemonOpt, str),
    _param("journal", JournalOpt, Path),
    _param("isolator", IsolatorOpt, str),
    _param("probe_lab", typer.Option(None, "--probe-lab", help="Probe the hosts of the fault "
                                     "lab in this directory (namespaces and fabric addresses)."),
           Path),
]


def run_recover(*, daemon: str | None, journal: Path | None, isolator: str,
                probe_lab: Path | None, **settings: Any) -> None:
    """Follow the daemon's live fault stream and recover jobs: isolate the faulty node, have
    the job restarted without it. Every decision is recorded (see `c4 recoveries`)."""
    from c4.settings import build
    from diagnosis.client import DaemonClient
    from recovery.config import RecoverConfig
    from recovery.controller import Controller
    from recovery.errors import ConfigError, RecoveryError

    try:
        config = build(RecoverConfig, settings, ConfigError)
        policy = config.policy
        iso = _isolator(isolator)
        jr = _journal(journal)
    except RecoveryError as exc:
        _fail(exc)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client = DaemonClient(daemon)
    extra = {}
    if policy.require_confirmation:
        from c4.lab_state import read as read_lab
        from diagnosis.probes.confirm import ProbeConfirmer
        from diagnosis.probes.gloo import GlooProber
        from diagnosis.probes.hosts import HostResolver

        lab_state = read_lab(probe_lab) if probe_lab else None
        extra["confirm"] = ProbeConfirmer(GlooProber(), HostResolver.for_lab(lab_state))
    ctl = Controller.for_daemon(client, jr, iso, policy, config=config.controller, **extra)
    _out().print(f"c4 recover: daemon {client.address}, isolator {iso.name}, journal "
                  f"{jr.path}{' (dry run)' if policy.dry_run else ''}", highlight=False)
    try:
        ctl.run(client, stop)
    finally:
        client.close()
        jr.close()


def recoveries(
    recovery_id: int = typer.Argument(0, help="Show this recovery's transitions (0: list)."),
    job: str = typer.Option("", "--job", help="Only this job."),
    decisions: int = typer.Option(20, "--decisions",
                                  help="Also show this many latest decisions (0: none)."),
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP),
    journal: Path = JournalOpt,
) -> None:
    """Recoveries with their timelines, lost work and each job's ETTR, and the controller's
    latest decisions with their reasons."""
    from recovery.timeline import job_efficiency, timeline

    jr = _journal(journal)
    recs = [r for r in jr.recoveries(job) if not recovery_id or r.id == recovery_id]
    lines = [timeline(jr, r) for r in recs]
    jobs = sorted({r.job for r in recs} | ({job} if job else set(jr.jobs())))
    effs = [e for e in (job_efficiency(jr, j) for j in jobs) if e is not None]
    decs = jr.decisions(job, limit=decisions) if decisions and not recovery_id else []
    if fmt is not Format.table:
        doc: dict[str, Any] = {
            "recoveries": [{"id": t.recovery.id, "job": t.recovery.job,
                            "fault_id": t.recovery.fault_id, "node": t.recovery.node,
                            "state": t.recovery.state.value, "backend": t.recovery.backend,
                            "reason": t.recovery.reason, "note": t.recovery.note,
                            "timeline_ns": t.at, "resumed_step": t.resumed_step,
                            "lost_steps": t.lost_steps, "lost_work_s": t.lost_work_s,
                            "downtime_s": t.downtime_s, "load_s": t.load_s} for t in lines],
            "jobs": [{"job": e.job, "wall_s": e.wall_s, "productive_s": e.productive_s,
                      "ettr": e.ettr, "attempts": e.attempts, "running": e.running}
                     for e in effs],
            "decisions": [d.__dict__ for d in decs]}
        if recovery_id:
            doc["transitions"] = [{"t_ns": t.t_ns, "from": t.src.value, "to": t.dst.value,
                                   "note": t.note} for t in jr.transitions(recovery_id)]
        emit_object(fmt, doc)
        return
    t = Table(title="recoveries (phases in seconds after the report)")
    for col in ("id", "job", "node", "state", "reported", "isolated", "stopped", "relaunched",
                "first step", "lost work", "downtime"):
        t.add_column(col)
    for tl in lines:
        r = tl.recovery
        lost = "-" if tl.lost_steps is None else f"{tl.lost_steps} steps, {_secs(tl.lost_work_s)}"
        t.add_row(str(r.id), r.job, r.node, r.state.value, _when(tl.at.get("report")),
                  *(_secs(tl.seconds("report", p)) for p in ("isolated", "stopped",
                                                             "relaunched", "first_step")),
                  lost, _secs(tl.downtime_s))
    _out().print(t)
    if effs:
        e = Table(title="jobs")
        for col in ("job", "attempts", "wall clock", "productive", "ETTR", "running"):
            e.add_column(col)
        for eff in effs:
            e.add_row(eff.job, str(eff.attempts), _secs(eff.wall_s), _secs(eff.productive_s),
                      f"{eff.ettr:.3f}", "yes" if eff.running else "no")
        _out().print(e)
    if recovery_id:
        tt = Table(title=f"recovery {recovery_id}: transitions")
        for col in ("time", "from", "to", "note"):
            tt.add_column(col, overflow="fold")
        for tr in jr.transitions(recovery_id):
            tt.add_row(_when(tr.t_ns), tr.src.value, tr.dst.value, tr.note)
        _out().print(tt)
    if decs:
        d = Table(title="decisions (latest last)")
        for col in ("time", "job", "fault", "rev", "kind", "node", "action", "reason"):
            d.add_column(col, overflow="fold")
        for row in decs:
            d.add_row(_when(row.t_ns), row.job, row.fault_id, str(row.revision), row.kind,
                      row.node or "-", row.action, row.reason)
        _out().print(d)


@nodes_app.command("list")
def nodes_list(isolator: str = IsolatorOpt,
               fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP)) -> None:
    """Nodes the isolation backend holds out of service, with the reason."""
    from recovery.errors import RecoveryError

    try:
        held = _isolator(isolator).isolated()
    except RecoveryError as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit(fmt, "nodes", ({"node": n, "reason": r} for n, r in sorted(held.items())))
        return
    t = Table(title="isolated nodes")
    t.add_column("node")
    t.add_column("reason", overflow="fold")
    for node, reason in sorted(held.items()):
        t.add_row(node, reason)
    _out().print(t)


@nodes_app.command("release")
def nodes_release(node: str = typer.Argument(..., help="The repaired node."),
                  isolator: str = IsolatorOpt) -> None:
    """Return a repaired node to service."""
    from recovery.errors import RecoveryError

    try:
        iso = _isolator(isolator)
        if node not in iso.isolated():
            _out().print(f"{node} is not isolated ({iso.name})", highlight=False)
            return
        iso.release(node)
    except RecoveryError as exc:
        _fail(exc)
    _out().print(f"released {node} ({iso.name})", highlight=False)


@nodes_app.command("isolate")
def nodes_isolate(node: str = typer.Argument(..., help="The node to take out of service."),
                  reason: str = typer.Option(..., "--reason", help="Why (recorded)."),
                  isolator: str = IsolatorOpt) -> None:
    """Isolate a node by hand (jobs under c4 launch move off it)."""
    from recovery.errors import RecoveryError

    try:
        _isolator(isolator).isolate(node, f"by hand: {reason}")
    except RecoveryError as exc:
        _fail(exc)
    _out().print(f"isolated {node}", highlight=False)


LAUNCH_EXTRA = [
    inspect.Parameter("command", inspect.Parameter.KEYWORD_ONLY, annotation=list[str],
                      default=typer.Argument(..., help="After --: torchrun OPTIONS SCRIPT "
                                             "ARGS, or SCRIPT ARGS.")),
    _param("lab", typer.Option(None, "--lab", help="Run on the hosts of the fault lab in this "
                               "directory (`c4 lab up`), in their namespaces."), Path),
    _param("journal", JournalOpt, Path),
    _param("isolator", IsolatorOpt, str),
]


def run_launch(*, command: list[str], lab: Path | None, journal: Path | None, isolator: str,
               **settings: Any) -> None:
    """Run a torchrun job over hosts; when a host is isolated (or the job fails) stop it and
    relaunch it on healthy hosts, where it resumes from its newest complete checkpoint."""
    from c4.errors import C4Error
    from c4.settings import build
    from recovery.errors import LaunchError, RecoveryError
    from recovery.supervisor import LaunchConfig, Supervisor

    try:
        fields: dict[str, Any] = {"command": tuple(command)}
        if lab is not None:
            from recovery.launchers import make_launcher

            fields["launcher"] = make_launcher("lab", lab)
        cfg = build(LaunchConfig, settings, LaunchError, fields)
        sup = Supervisor(cfg, _isolator(isolator), _journal(journal))
    except C4Error as exc:  # a RecoveryError, or the lab's launcher refusing the lab
        _fail(exc)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sup.request_stop())
    try:
        rc = sup.run()
    except RecoveryError as exc:
        _fail(exc)
    raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    from c4.security.cli import with_client_security
    from c4.settings import derive_command
    from recovery.config import RecoverConfig

    recover = derive_command(RecoverConfig, run_recover, RECOVER_EXTRA)
    app.command("recover")(with_client_security(recover))
    app.command("recoveries")(recoveries)
    from recovery.supervisor import LaunchConfig

    app.command("launch", context_settings={"allow_interspersed_args": False})(
        derive_command(LaunchConfig, run_launch, LAUNCH_EXTRA))
    app.add_typer(nodes_app, name="nodes")
