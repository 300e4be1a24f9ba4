"""``c4 probe``: test suspects directly, the way operators bisect with nccl-tests.

Hosts are lab host ids (when a lab is up: the probe runs inside their namespaces), loopback
addresses (run on this machine), or other addresses with ``--remote ssh``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from c4.output import FORMAT_HELP, Format, emit_object

probe_app = typer.Typer(help="Probe hosts actively (gloo or nccl-tests): a pair, a bisection "
                        "over hosts, or a suspect against healthy peers.", no_args_is_help=True)

_FORMAT = typer.Option(Format.table, "--format", help=FORMAT_HELP)
_BACKEND = typer.Option("gloo", "--backend", help="'gloo' (torch.distributed, CPU) or "
                        "'nccl-tests' (GPU clusters).")
_BYTES = typer.Option(None, "--bytes", help="Message size in bytes (default 4 MiB for gloo, "
                      "256 MiB for nccl-tests).")
_ITERS = typer.Option(5, "--iters", help="Timed iterations per probe.")
_TIMEOUT = typer.Option(60.0, "--timeout", help="Seconds for one probe, start-up included.")
_LAB = typer.Option(None, "--lab-dir", envvar="C4_LAB_DIR", help="Lab directory whose host "
                    "ids may be named (default: the lab's default directory, if a lab is up).")
_TOPO = typer.Option(None, "--topology", help="Topology JSON: compare with what the links "
                     "allow (default: the lab's topology).")
_REMOTE = typer.Option(None, "--remote", help="Command that runs a probe rank on another "
                       "machine, the address appended (e.g. 'ssh').")
_RATIO = typer.Option(0.5, "--slow-ratio", help="Slow means below this fraction of the "
                      "reference bandwidth.")
_LAUNCHER = typer.Option("mpirun", "--launcher", help="nccl-tests: 'mpirun', 'srun' or "
                         "'local'.")
_NCCL_DIR = typer.Option(None, "--nccl-tests-dir", help="nccl-tests build directory "
                         "(default: PATH).")
_GPUS = typer.Option(1, "--gpus-per-host", help="Ranks per host (nccl-tests: GPUs).")
_REPORTS = typer.Option(None, "--reports", help="Fault reports (c4 analyze --format json) to "
                        "re-score with the verdicts: confirmed suspects gain, cleared ones go.")


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


def _setup(backend: str, size: int | None, iters: int, timeout: float, lab_dir: Path | None,
           topology: Path | None, remote: str | None, launcher: str, nccl_dir: Path | None,
           gpus: int) -> tuple[Any, Any, Any]:
    """(prober, resolver, topology or None)."""
    from diagnosis.probes.hosts import HostResolver

    lab_state = _lab_state(lab_dir)
    resolver = HostResolver.for_lab(lab_state, remote=tuple(remote.split()) if remote else (),
                                    ranks=gpus)
    if backend == "gloo":
        from diagnosis.probes.gloo import GlooConfig, GlooProber

        prober: Any = GlooProber(GlooConfig(size_bytes=size or 4 << 20, iters=iters,
                                            timeout_s=timeout))
    elif backend == "nccl-tests":
        from diagnosis.probes.nccl_runner import NcclTestsConfig, NcclTestsProber

        prober = NcclTestsProber(NcclTestsConfig(
            launcher=launcher, bin_dir=str(nccl_dir or ""), size_bytes=size or 256 << 20,
            iters=iters, timeout_s=timeout))
    else:
        raise typer.BadParameter(f"unknown backend {backend!r}; use 'gloo' or 'nccl-tests'")
    topo = None
    path = topology or (Path(lab_state["topology"]) if lab_state else None)
    if path is not None:
        from c4.topology import Topology

        topo = Topology.load(path)
    return prober, resolver, topo


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


@probe_app.command("pair")
def pair(
    a: str = typer.Argument(..., help="First host (lab host id or address)."),
    b: str = typer.Argument(..., help="Second host."),
    backend: str = _BACKEND, size: int | None = _BYTES, iters: int = _ITERS,
    timeout: float = _TIMEOUT, lab_dir: Path | None = _LAB, topology: Path | None = _TOPO,
    remote: str | None = _REMOTE, launcher: str = _LAUNCHER, nccl_dir: Path | None = _NCCL_DIR,
    gpus: int = _GPUS, fmt: Format = _FORMAT,
) -> None:
    """Measure point-to-point bandwidth between two hosts (both directions at once)."""
    from c4.errors import C4Error
    from diagnosis.probes.plans import expected_busbw

    try:
        prober, resolve, topo = _setup(backend, size, iters, timeout, lab_dir, topology,
                                       remote, launcher, nccl_dir, gpus)
        r = prober.pair(resolve(a), resolve(b))
    except (C4Error, ValueError) as exc:
        _fail(exc)
    expected = expected_busbw(topo, [a, b])
    if fmt is not Format.table:
        emit_object(fmt, {"result": r.to_json(), "expected_GBps": expected})
    else:
        _results_table(f"{prober.name} pair probe" + (
            f" (links allow {expected:.4g} GB/s)" if expected else ""), [r])
    if not r.ok:
        raise typer.Exit(1)


@probe_app.command("bisect")
def bisect_cmd(
    hosts: list[str] = typer.Argument(..., help="Hosts to search (lab host ids or addresses)."),
    known_good: list[str] = typer.Option([], "--known-good", help="A host known to be healthy "
                                         "(repeatable): partner for single hosts."),
    backend: str = _BACKEND, size: int | None = _BYTES, iters: int = _ITERS,
    timeout: float = _TIMEOUT, lab_dir: Path | None = _LAB, topology: Path | None = _TOPO,
    remote: str | None = _REMOTE, launcher: str = _LAUNCHER, nccl_dir: Path | None = _NCCL_DIR,
    gpus: int = _GPUS, ratio: float = _RATIO, reports: Path | None = _REPORTS,
    fmt: Format = _FORMAT,
) -> None:
    """Bisect a set of hosts for the slow one(s): halves, then pairs with cleared hosts."""
    from c4.errors import C4Error
    from diagnosis.probes.plans import PlanConfig, bisect

    try:
        prober, resolve, topo = _setup(backend, size, iters, timeout, lab_dir, topology,
                                       remote, launcher, nccl_dir, gpus)
        out = bisect(prober, resolve.many(hosts), known_good=resolve.many(known_good),
                     config=PlanConfig(slow_ratio=ratio), topology=topo)
        adjusted = _adjusted(reports, list(out.verdicts))
    except (C4Error, ValueError) as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit_object(fmt, {**out.to_json(), **({"reports": adjusted} if adjusted is not None
                                              else {})})
    else:
        _results_table(f"{prober.name} bisection: {out.reason}", list(out.steps),
                       list(out.verdicts))
        _print_adjusted(adjusted)
    if out.culprits:
        raise typer.Exit(1)


@probe_app.command("confirm")
def confirm_cmd(
    suspect: str = typer.Argument(..., help="The suspect host."),
    peers: list[str] = typer.Argument(..., help="Known-good peers (two or more give a "
                                      "baseline)."),
    backend: str = _BACKEND, size: int | None = _BYTES, iters: int = _ITERS,
    timeout: float = _TIMEOUT, lab_dir: Path | None = _LAB, topology: Path | None = _TOPO,
    remote: str | None = _REMOTE, launcher: str = _LAUNCHER, nccl_dir: Path | None = _NCCL_DIR,
    gpus: int = _GPUS, ratio: float = _RATIO, reports: Path | None = _REPORTS,
    fmt: Format = _FORMAT,
) -> None:
    """Confirm or clear a suspect with pair tests against peers (exit 1 when confirmed)."""
    from c4.errors import C4Error
    from diagnosis.probes.plans import CONFIRMED, PlanConfig, pairwise

    try:
        prober, resolve, topo = _setup(backend, size, iters, timeout, lab_dir, topology,
                                       remote, launcher, nccl_dir, gpus)
        v = pairwise(prober, resolve(suspect), resolve.many(peers),
                     config=PlanConfig(slow_ratio=ratio), topology=topo)
        adjusted = _adjusted(reports, [v])
    except (C4Error, ValueError) as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit_object(fmt, {**v.to_json(), **({"reports": adjusted} if adjusted is not None
                                            else {})})
    else:
        _results_table(f"{prober.name} probe of {suspect}: {v.status}", list(v.results), [v])
        _print_adjusted(adjusted)
    if v.status == CONFIRMED:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(probe_app, name="probe")
