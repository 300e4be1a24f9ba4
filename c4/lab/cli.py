"""``c4 lab``: build a namespace fabric, run jobs on it, inject and clear faults."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from c4.output import FORMAT_HELP, Format, emit_object

lab_app = typer.Typer(help="The fault lab: hosts as network namespaces on a leaf/spine fabric, "
                           "with the daemon, sidecars, real jobs and injected faults (root).",
                      no_args_is_help=True)

LAB_DIR = typer.Option(None, "--lab-dir", envvar="C4_LAB_DIR",
                       help="Directory of the lab's state, topology, database and logs "
                            "(default: c4l-lab in the temporary directory).")


def _dir(lab_dir: Path | None) -> Path:
    from c4.lab_state import default_lab_dir

    return (lab_dir or default_lab_dir()).resolve()


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def run_up(*, no_services: bool, lab_dir: Path | None, **spec_options: Any) -> None:
    """Build the fabric, write its topology file, start the daemon and one sidecar per host."""
    from c4.lab.lab import up
    from c4.lab.spec import LabSpec
    from c4.lab.system import LabError
    from c4.settings import build

    try:
        spec = build(LabSpec, spec_options, LabError)
        st = up(_dir(lab_dir), spec, services=not no_services)
    except LabError as exc:
        _fail(exc)
    typer.echo(f"lab up: {spec.hosts} hosts x {spec.gpus_per_host} GPUs, {spec.leaves} leaves, "
               f"{spec.spines} spines; topology {st['topology']}")
    if st["daemon"]:
        typer.echo(f"daemon {st['daemon']['address']} (use --daemon {st['daemon']['address']})")
    for h, info in st["hosts"].items():
        typer.echo(f"  {h}: netns {info['ns']}, fabric {info['addr']} ({info['ifname']}), "
                   f"leaf {info['leaf']}")


def _up_command() -> Callable[..., None]:
    """``c4 lab up``: the fabric's options from LabSpec's fields, and the command's own."""
    from c4.lab.spec import LabSpec
    from c4.settings import derive_command

    own = [inspect.Parameter("no_services", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                             default=typer.Option(False, "--no-services", help="Build only the "
                                                  "fabric: no daemon, no sidecars.")),
           inspect.Parameter("lab_dir", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                             default=LAB_DIR)]
    return derive_command(LabSpec, run_up, own)


lab_app.command("up")(_up_command())


@lab_app.command("down")
def down_cmd(lab_dir: Path = LAB_DIR) -> None:
    """Remove everything the lab made (also leftovers of a crashed lab, found by prefix)."""
    from c4.lab.lab import down
    from c4.lab.system import LabError

    try:
        typer.echo(down(_dir(lab_dir)))
    except LabError as exc:
        _fail(exc)


@lab_app.command("status")
def status_cmd(
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP + " json: the "
                               "whole lab state."),
    lab_dir: Path = LAB_DIR,
) -> None:
    """The lab's hosts, services and faults (with their times: the ground truth)."""
    from c4.lab_state import read

    st = read(_dir(lab_dir))
    if st is None:
        typer.echo("no lab is up")
        raise typer.Exit(1)
    if fmt is not Format.table:
        emit_object(fmt, st)
        return
    typer.echo(f"lab in {st['lab_dir']}: {len(st['hosts'])} hosts; daemon "
               f"{(st['daemon'] or {}).get('address', 'none')}")
    for h, info in st["hosts"].items():
        typer.echo(f"  {h}: netns {info['ns']}, fabric {info['addr']}, leaf {info['leaf']}")
    for j in st["jobs"]:
        typer.echo(f"  job {j['job']}: {j['world_size']} ranks, {Path(j['script']).name}")
    for f in st["faults"]:
        state_ = "active" if f["cleared_at"] is None else "cleared"
        typer.echo(f"  fault {f['id']}: {f['kind']} on {f['target']} "
                   f"({', '.join(f['components'])}) {state_}")


@lab_app.command("truth")
def truth_cmd(lab_dir: Path = LAB_DIR) -> None:
    """The injected faults as ground truth (JSON, shaped like the simulator's truth.json)."""
    from c4.lab.truth import truth
    from c4.lab_state import LAST_STATE_FILE, read

    d = _dir(lab_dir)
    st = read(d)
    if st is None and (d / LAST_STATE_FILE).exists():
        st = json.loads((d / LAST_STATE_FILE).read_text())  # the last lab, after `down`
    if st is None:
        typer.echo("no lab is up and none was taken down here", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(truth(st), indent=1))


@lab_app.command("inject")
def inject_cmd(
    fault: str = typer.Argument(..., help="slow-link, lossy-link, dead-link, slow-gpu, hang, "
                                          "crash, cpu-contention or memory-pressure (or "
                                          "slow_link, ... as c4 sim spells them)."),
    target: str = typer.Argument(..., help="A link id (a~b), NIC id or switch id for link "
                                           "faults; a host id, GPU id, rank:N or pid:N for the "
                                           "others."),
    duration: float = typer.Option(None, "--for", help="Clear the fault after SECONDS."),
    rate_mbit: float = typer.Option(None, "--rate-mbit",
                                    help="slow-link: the rate (default a tenth of capacity)."),
    loss: int = typer.Option(30, "--loss", help="lossy-link: percent of packets dropped."),
    cpu: int = typer.Option(20, "--cpu", help="slow-gpu, cpu-contention: CPU quota, percent "
                                              "of one core (cpu-contention: of the core the "
                                              "host's ranks and the burners are pinned to)."),
    burners: int = typer.Option(2, "--burners", help="cpu-contention: busy-loop processes "
                                                     "competing with the host's ranks."),
    memory_mb: int = typer.Option(64, "--mb", help="memory-pressure: MiB the host's ranks get "
                                                   "over their resident size."),
    reroute: bool = typer.Option(False, "--reroute",
                                 help="dead-link: the other leaves stop using the dead uplink "
                                      "(as a routing protocol would); default: black hole."),
    lab_dir: Path = LAB_DIR,
) -> None:
    """Inject a fault; it is recorded with its time in the lab state."""
    from c4.lab.faults import inject
    from c4.lab.system import LabError

    try:
        # `c4 sim --fault` spells them slow_link, slow_gpu, ...: either is taken
        rec = inject(_dir(lab_dir), fault.replace("_", "-"), target, duration=duration,
                     rate_mbit=rate_mbit, loss_pct=loss, cpu_pct=cpu, reroute=reroute,
                     burners=burners, memory_mb=memory_mb)
    except LabError as exc:
        _fail(exc)
    typer.echo(f"fault {rec['id']}: {fault} on {', '.join(rec['components'])}"
               + (f" for {duration:g} s" if duration else ""))


@lab_app.command("clear")
def clear_cmd(
    fault_id: int = typer.Option(None, "--id", help="Clear only this fault."),
    lab_dir: Path = LAB_DIR,
) -> None:
    """Undo the active faults."""
    from c4.lab.faults import clear
    from c4.lab.system import LabError

    try:
        done = clear(_dir(lab_dir), fault_id)
    except LabError as exc:
        _fail(exc)
    typer.echo(f"cleared {len(done)} fault(s)"
               + "".join(f"\n  {r['id']}: {r['kind']} on {r['target']}" for r in done))


@lab_app.command("run", context_settings={"allow_extra_args": True,
                                          "ignore_unknown_options": True})
def run_cmd(
    ctx: typer.Context,
    job: str = typer.Option(None, "--job", help="Job name (default lab-TIME-N)."),
    nproc: int = typer.Option(None, "--nproc", help="Ranks per host (default: GPUs per host)."),
    timeout: float = typer.Option(600, "--timeout", help="Stop the job after SECONDS."),
    lab_dir: Path = LAB_DIR,
) -> None:
    """Run `-- SCRIPT ARGS` (or the built-in DP x PP example if none) with one torchrun node
    per lab host, gloo over the fabric, the collectors on."""
    from c4.lab.lab import EXAMPLE, start_job, wait_job
    from c4.lab.system import LabError

    args = list(ctx.args)
    script, rest = (args[0], args[1:]) if args else (str(EXAMPLE), [])
    try:
        name, services = start_job(_dir(lab_dir), script, rest, job=job, nproc=nproc)
    except LabError as exc:
        _fail(exc)
    typer.echo(f"job {name}: logs in {_dir(lab_dir)}/HOST/{name}.log")
    code = wait_job(services, timeout)
    if code:
        typer.echo(f"job {name} failed ({code}); node 0 says:\n"
                   f"{services[0].output()[-1500:]}", err=True)
    raise typer.Exit(code)


@lab_app.command("plan-apply")
def plan_apply_cmd(
    plan_file: Path = typer.Argument(..., help="A plan from `c4 plan --format json`."),
    lab_dir: Path = LAB_DIR,
) -> None:
    """Pin each cross-leaf host pair of a plan to its spine with policy routes."""
    from c4.lab.lab import layout_of, require
    from c4.lab.plan import apply_pins, pins_from_plan
    from c4.lab.system import LabError

    try:
        d = _dir(lab_dir)
        pins = pins_from_plan(layout_of(require(d)), json.loads(plan_file.read_text()))
        apply_pins(d, pins)
    except (LabError, OSError, ValueError, KeyError) as exc:
        _fail(exc)
    typer.echo("\n".join(f"{p.src} > {p.dst} via {p.spine}" for p in pins) or "no pins")


@lab_app.command("plan-clear")
def plan_clear_cmd(lab_dir: Path = LAB_DIR) -> None:
    """Remove the policy routes: back to ECMP."""
    from c4.lab.plan import clear_pins
    from c4.lab.system import LabError

    try:
        clear_pins(_dir(lab_dir))
    except LabError as exc:
        _fail(exc)
    typer.echo("policy routes removed: ECMP")


@lab_app.command("plan-bench")
def plan_bench_cmd(
    trials: int = typer.Option(4, "--trials", help="Fresh process groups (ECMP draws) per mode."),
    megabytes: int = typer.Option(16, "--mb", help="MiB sent per flow per iteration."),
    iters: int = typer.Option(3, "--iters", help="Iterations per trial (median taken)."),
    fmt: Format = typer.Option(Format.table, "--format", help=FORMAT_HELP),
    lab_dir: Path = LAB_DIR,
) -> None:
    """Cross-leaf transfer bandwidth with ECMP, then with the traffic planner's pins."""
    from dataclasses import asdict

    from c4.lab.plan import plan_bench
    from c4.lab.system import LabError

    try:
        res = plan_bench(_dir(lab_dir), trials=trials, megabytes=megabytes, iters=iters)
    except LabError as exc:
        _fail(exc)
    if fmt is not Format.table:
        emit_object(fmt, asdict(res))
    else:
        typer.echo(res.table())


def register(app: typer.Typer) -> None:
    app.add_typer(lab_app, name="lab")
