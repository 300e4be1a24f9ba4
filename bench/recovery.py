"""Recovery: time from the fault report to the first training step after the restart, by phase.

    python -m bench.recovery [--runs 1] [--hosts 4] [--spares 0] [--grace 5]

Real parts, as in the end-to-end test: a daemon and a sidecar, ``c4 recover`` on the live fault
stream, ``c4 launch`` running ``recovery/train_example.py`` (gloo, one rank per host,
checkpoints every 10 steps). One host's rank is slowed with a cgroup v1 CPU quota (root); the
daemon's detectors report it, and the recovery is timed from the journal:

    onset → report        detection (the diagnosis engine; not the recovery's own time)
    report → isolated     the controller decides and the blocklist takes the node
    isolated → stopping   the supervisor sees the isolation
    stopping → stopped    graceful stop of the job (SIGTERM, SIGKILL after --grace)
    stopped → relaunched  the job started again on the remaining (or spare) hosts
    relaunched → loaded   the training script's own start-up: interpreter, torch import,
                          rendezvous, process group, checkpoint load (shown apart too)
    loaded → first step   the first step after the restart

Target: report → first step under 30 s, not counting the script's start-up (the last row).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from c4.demo.services import start_daemon, start_sidecar
from c4.lab.procs import cpu_quota
from c4.processes import REPO, Service, c4_command, free_port, wait_for
from diagnosis.client import DaemonClient
from recovery.journal import Journal
from recovery.timeline import job_efficiency, timeline

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
PHASES = [("onset", "report", "detection (onset → report)"),
          ("report", "isolated", "report → isolated"),
          ("isolated", "stopping", "isolated → stop requested"),
          ("stopping", "stopped", "stop requested → stopped"),
          ("stopped", "relaunched", "stopped → relaunched"),
          ("relaunched", "loaded", "relaunched → checkpoint loaded (script start-up)"),
          ("loaded", "first_step", "checkpoint loaded → first step")]


def one_run(work: Path, hosts: list[str], spares: list[str], grace: float) -> dict:
    job = f"bench-{uuid.uuid4().hex[:6]}"
    slow_host = hosts[len(hosts) // 2]
    port = free_port()
    journal_path = work / "journal.db"
    common = ["--journal", str(journal_path), "--isolator", f"blocklist:{work / 'block.json'}"]
    services: list[Service] = []
    try:
        services.append(start_daemon(work, port))
        car, sock = start_sidecar(work, port, "local")
        services.append(car)
        services.append(Service(c4_command("recover", "--daemon", f"127.0.0.1:{port}",
                                           "--trust-unauthenticated-ingest", *common),
                                work / "recover.log").start())
        services.append(Service(
            c4_command("launch", "--job", job, "--hosts", ",".join(hosts), "--spares",
                       ",".join(spares), "--workdir", str(work / "launch"), "--sidecar-socket",
                       str(sock), "--grace", str(grace), *common, "--", "torchrun",
                       str(REPO / "recovery" / "train_example.py")),
            work / "launch.log",
            env={"C4_TRAIN_STEPS": "100000", "C4_TRAIN_CKPT_EVERY": "10",
                 "C4_TRAIN_WORK": "30", "C4_TRAIN_BATCH": "48",
                 "C4_TRAIN_CKPT_DIR": str(work / "ckpt")}).start())
        progress = work / "launch" / f"{job}-progress-0.jsonl"
        wait_for(lambda: progress.exists() and '"checkpoint"' in progress.read_text(), 180,
                 what="the first checkpoint")
        with DaemonClient(f"127.0.0.1:{port}") as client:
            ranks = wait_for(lambda: len(client.ranks(job)) == len(hosts) and
                             client.ranks(job), 60, what="all ranks at the daemon")
            pid = next(r.pid for r in ranks if r.host == slow_host)
            journal = Journal(journal_path)
            with cpu_quota(pid, 5):
                rec = wait_for(lambda: next(iter(journal.recoveries(job)), None), 180,
                               what="a recovery")
            rec = wait_for(lambda: (r := journal.recovery(rec.id)).state.terminal and r, 180,
                           what="the recovery to finish")
        tl = timeline(journal, rec)
        eff = job_efficiency(journal, job)
        return {"state": rec.state.value, "at": tl.at, "lost_steps": tl.lost_steps,
                "load_s": tl.load_s,
                "lost_work_s": tl.lost_work_s, "ettr": eff.ettr if eff else None,
                "wall_s": eff.wall_s if eff else None}
    finally:
        for svc in reversed(services):
            svc.stop(timeout=15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--spares", type=int, default=0)
    ap.add_argument("--grace", type=float, default=5.0)
    ap.add_argument("--json", action="store_true", help="Print the raw timelines as JSON too.")
    args = ap.parse_args()
    console = Console()
    if os.geteuid() != 0 or not os.access(CPU_CGROUP / "cgroup.procs", os.W_OK):
        console.print("needs root and a writable cgroup v1 cpu controller at "
                      f"{CPU_CGROUP} to slow a host from outside")
        raise SystemExit(2)
    hosts = [f"node{i}" for i in range(args.hosts)]
    spares = [f"node{args.hosts + i}" for i in range(args.spares)]
    runs = []
    for _ in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="c4-bench-recovery-"))
        try:
            runs.append(one_run(work, hosts, spares, args.grace))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    t = Table(title=f"recovery of a slowed host, {args.hosts} hosts x 1 gloo rank, "
                    f"{args.spares} spare(s) (seconds)")
    t.add_column("phase")
    for i in range(len(runs)):
        t.add_column(f"run {i + 1}", justify="right")

    def span(run: dict, a: str, b: str) -> str:
        at = run["at"]
        return f"{(at[b] - at[a]) / 1e9:.2f}" if a in at and b in at else "-"

    for a, b, label in PHASES:
        t.add_row(label, *(span(r, a, b) for r in runs))
        if b == "loaded":
            t.add_row("  of which checkpoint load", *(
                f"{r['load_s']:.2f}" if r["load_s"] is not None else "-" for r in runs))
    t.add_row("[bold]report → first step[/bold]", *(span(r, "report", "first_step")
                                                    for r in runs))

    def without_startup(run: dict) -> str:
        at = run["at"]
        if not all(k in at for k in ("report", "relaunched", "loaded", "first_step")):
            return "-"
        # the checkpoint load counts as recovery, the rest of the start-up does not
        own = (at["relaunched"] - at["report"] + at["first_step"] - at["loaded"]) / 1e9
        return f"{own + (run['load_s'] or 0.0):.2f}"

    t.add_row("[bold]report → first step without script start-up, with checkpoint load "
              "(target < 30 s)[/bold]",
              *(without_startup(r) for r in runs))
    t.add_row("lost work (steps / s)", *(f"{r['lost_steps']} / {r['lost_work_s']:.2f}"
                                         if r["lost_steps"] is not None else "-" for r in runs))
    t.add_row("job ETTR so far", *(f"{r['ettr']:.3f} of {r['wall_s']:.0f} s"
                                   if r["ettr"] is not None else "-" for r in runs))
    t.add_row("final state", *(r["state"] for r in runs))
    console.print(t)
    if args.json:
        console.print_json(json.dumps(runs))


if __name__ == "__main__":
    main()
