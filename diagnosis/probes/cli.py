"""``c4 probe``: test suspects directly, the way operators bisect with nccl-tests.

Hosts are lab host ids (when a lab is up: the probe runs inside their namespaces), loopback
addresses (run on this machine), or other addresses with ``--remote ssh``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from c4.output import FORMAT_HELP, Format, emit_object
from c4.settings import build, derive_command
from diagnosis.errors import ConfigError
from diagnosis.probes.settings import PlanProbeSettings, ProbeSettings

if TYPE_CHECKING:
    from c4.topology import Topology
    from diagnosis.probes.api import ProbeHost, Prober
    from diagnosis.probes.hosts import HostResolver

probe_app = typer.Typer(help="Probe hosts actively (gloo or nccl-tests): a pair, a bisection "
                        "over hosts, or a suspect against healthy peers.", no_args_is_help=True)


def _param(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


# The commands' own arguments and options; the settings (backend, sizes, hosts' whereabouts,
# the plans' judgement) are derived from diagnosis.probes.settings.
_FORMAT = _param("fmt", typer.Option(Format.table, "--format", help=FORMAT_HELP), Format)
_REPORTS = _param("reports", typer.Option(None, "--reports", help="Fault reports (c4 analyze "
                                          "--format json) to re-score with the verdicts: "
                                          "confirmed suspects gain, cleared ones go."),
                  Path | None)


def _adjusted(path: Path | None, verdicts: list[Any]) -> list[dict[str, Any]] | None:
    """The reports of ``path`` re-scored by the verdicts (None without ``--reports``)."""
    if path is None:
        return None
    from c4.errors import FormatError
    from c4.report import FaultReport
    from diagnosis.probes.adjust import apply_probes

    try:
        doc = json.loads(Path(path).read_text())
        reports = [FaultReport.from_json(r) for r in doc["reports"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"not a fault report document ({exc})", source=str(path)) from exc
    return [apply_probes(r, verdicts).to_json() for r in reports]


def _print_adjusted(adjusted: list[dict[str, Any]] | None) -> None:
    for r in adjusted or []:
        top = r["suspects"][0] if r["suspects"] else None
        typer.echo(f"{r['kind']}: " + (f"top suspect {top['type']} {top['id']} score "
                                       f"{top['score']:.2f}" if top else "no suspect left")
                   + f" - {r['summary']}")


def _setup(settings: ProbeSettings) -> tuple[Prober, HostResolver, Topology | None]:
    """(prober, resolver, topology or None)."""
    from diagnosis.probes.hosts import HostResolver

    lab_state = _lab_state(settings.lab_dir)
    resolver = HostResolver.for_lab(lab_state, remote=tuple(settings.remote.split()),
                                    ranks=settings.gpus_per_host)
    topo = None
    path = settings.topology or (Path(lab_state["topology"]) if lab_state else None)
    if path is not None:
        from c4.topology import Topology

        topo = Topology.load(path)
    return settings.prober(), resolver, topo


def _lab_state(lab_dir: Path | None) -> dict[str, Any] | None:
    from c4.lab_state import default_lab_dir, read

    return read(Path(lab_dir) if lab_dir else default_lab_dir())


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def _results_table(title: str, results: list[Any], verdicts: list[Any] | None = None) -> None:
    from rich.table import Table

    from c4.output import make_console

    t = Table(title=title)
    for col in ("hosts", "op", "ok", "busbw GB/s", "algbw GB/s", "size", "seconds", "error"):
        t.add_column(col, justify="right" if col in ("busbw GB/s", "algbw GB/s", "size",
                                                     "seconds") else "left")
    for r in results:
        t.add_row("+".join(r.hosts), r.op, "yes" if r.ok else "NO", f"{r.busbw_GBps:.4g}",
                  f"{r.algbw_GBps:.4g}", str(r.size_bytes), f"{r.seconds:.1f}", r.error[:80])
    console = make_console()
    console.print(t)
    if verdicts:
        v = Table(title="verdicts")
        for col in ("host", "status", "measured GB/s", "reference GB/s", "expected GB/s",
                    "reason"):
            v.add_column(col)
        for x in verdicts:
            v.add_row(x.host, x.status, _g(x.measured_GBps), _g(x.reference_GBps),
                      _g(x.expected_GBps), x.reason)
        console.print(v)


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def run_pair(*, a: str, b: str, fmt: Format, **options: Any) -> None:
    """Measure point-to-point bandwidth between two hosts (both directions at once)."""
    from c4.errors import C4Error
    from diagnosis.probes.plans import expected_busbw

    try:
        prober, resolve, topo = _setup(build(ProbeSettings, options, ConfigError))
        r = prober.pair(resolve(a), resolve(b))
    except C4Error as exc:
        _fail(exc)
    expected = expected_busbw(topo, [a, b])
    if fmt is not Format.table:
        emit_object(fmt, {"result": r.to_json(), "expected_GBps": expected})
    else:
        _results_table(f"{prober.name} pair probe" + (
            f" (links allow {expected:.4g} GB/s)" if expected else ""), [r])
    if not r.ok:
        raise typer.Exit(1)


def _run_plan(options: dict[str, Any], plan: Callable[..., Any], *hosts: Any
              ) -> tuple[Any, Prober, list[dict[str, Any]] | None]:
    """Run ``plan(prober, *hosts resolved, config=, topology=)``: (its outcome, the prober,
    the ``--reports`` re-scored by its verdicts); a setting or probe that fails ends the
    command with its message."""
    from c4.errors import C4Error

    reports = options.pop("reports")
    try:
        settings = build(PlanProbeSettings, options, ConfigError)
        prober, resolve, topo = _setup(settings)
        out = plan(prober, *(resolve.many(h) if isinstance(h, list) else resolve(h)
                             for h in hosts), config=settings.plan, topology=topo)
        adjusted = _adjusted(reports, list(getattr(out, "verdicts", [out])))
    except C4Error as exc:
        _fail(exc)
    return out, prober, adjusted


def _emit(fmt: Format, doc: dict[str, Any], adjusted: list[dict[str, Any]] | None,
          show: Callable[[], None]) -> None:
    if fmt is not Format.table:
        emit_object(fmt, {**doc, **({"reports": adjusted} if adjusted is not None else {})})
    else:
        show()
        _print_adjusted(adjusted)


def run_bisect(*, hosts: list[str], known_good: list[str], fmt: Format, **options: Any) -> None:
    """Bisect a set of hosts for the slow one(s): halves, then pairs with cleared hosts."""
    from diagnosis.probes.plans import bisect

    def plan(prober: Prober, hs: list[ProbeHost], good: list[ProbeHost],
             **kw: Any) -> Any:
        return bisect(prober, hs, known_good=good, **kw)

    out, prober, adjusted = _run_plan(options, plan, hosts, known_good)
    _emit(fmt, out.to_json(), adjusted, lambda: _results_table(
        f"{prober.name} bisection: {out.reason}", list(out.steps), list(out.verdicts)))
    if out.culprits:
        raise typer.Exit(1)


def run_confirm(*, suspect: str, peers: list[str], fmt: Format, **options: Any) -> None:
    """Confirm or clear a suspect with pair tests against peers (exit 1 when confirmed)."""
    from diagnosis.probes.plans import CONFIRMED, pairwise

    v, prober, adjusted = _run_plan(options, pairwise, suspect, peers)
    _emit(fmt, v.to_json(), adjusted, lambda: _results_table(
        f"{prober.name} probe of {suspect}: {v.status}", list(v.results), [v]))
    if v.status == CONFIRMED:
        raise typer.Exit(1)


_HOST_B = _param("b", typer.Argument(..., help="Second host."), str)
probe_app.command("pair")(derive_command(ProbeSettings, run_pair, [
    _param("a", typer.Argument(..., help="First host (lab host id or address)."), str),
    _HOST_B, _FORMAT]))
probe_app.command("bisect")(derive_command(PlanProbeSettings, run_bisect, [
    _param("hosts", typer.Argument(..., help="Hosts to search (lab host ids or addresses)."),
           list[str]),
    _param("known_good", typer.Option([], "--known-good", help="A host known to be healthy "
                                      "(repeatable): partner for single hosts."), list[str]),
    _REPORTS, _FORMAT]))
probe_app.command("confirm")(derive_command(PlanProbeSettings, run_confirm, [
    _param("suspect", typer.Argument(..., help="The suspect host."), str),
    _param("peers", typer.Argument(..., help="Known-good peers (two or more give a "
                                   "baseline)."), list[str]),
    _REPORTS, _FORMAT]))


def register(app: typer.Typer) -> None:
    app.add_typer(probe_app, name="probe")
