"""Orchestrate the demo: daemon, two sidecars acting as two nodes, a torchrun job of 2 x 2 gloo
ranks with a planted slow rank, a live view of what arrives and what c4 finds."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from c4.processes import free_port, start_daemon, start_sidecar, torchrun_node

TRAIN = Path(__file__).with_name("train.py")


@dataclass(frozen=True)
class DemoConfig:
    steps: int = 120
    slow_rank: int = 3
    slow_ms: int = 60
    slow_from: int = 40
    keep: bool = False
    timeout_s: float = 300.0


def _view(client, job: str, elapsed: float) -> Group:
    status = client.status()
    jobs = [j for j in client.jobs() if j.job == job]
    faults = client.faults(job)
    head = (f"[bold]c4 demo[/bold]  {elapsed:5.1f} s   records ingested "
            f"{status.records_ingested:,}   rate {status.records_per_second:,.0f}/s   "
            f"sidecars {len(status.sidecars)}")
    jt = Table(title="jobs", expand=True)
    for col in ("job", "ranks", "hosts", "records stored"):
        jt.add_column(col)
    for j in jobs:
        jt.add_row(j.job, f"{j.ranks_seen}/{j.world_size}", ",".join(j.hosts), f"{j.ops:,}")
    ft = Table(title="fault reports", expand=True)
    for col in ("kind", "suspects", "summary"):
        ft.add_column(col, overflow="fold")
    for r in faults:
        ft.add_row(r.kind, ", ".join(f"{s.type} {s.id} ({s.score:.2f})" for s in r.suspects[:3]),
                   r.summary)
    return Group(Panel(head), jt, ft)


def run_demo(config: DemoConfig, console: Console | None = None) -> int:
    from diagnosis.client import DaemonClient

    console = console or Console()
    work = Path(tempfile.mkdtemp(prefix="c4-demo-"))
    job = f"demo-{int(time.time())}"
    services = []
    try:
        port = free_port()
        console.print(f"[bold]1.[/bold] daemon on 127.0.0.1:{port} (store: SQLite in {work})")
        daemon = start_daemon(work, port)
        services.append(daemon)
        console.print("[bold]2.[/bold] two sidecars, acting as nodes node0 and node1")
        cars = [start_sidecar(work, port, f"node{n}") for n in range(2)]
        services += [c for c, _ in cars]
        console.print(f"[bold]3.[/bold] torchrun job {job}: 2 nodes x 2 gloo ranks, "
                      f"{config.steps} steps; planted fault: rank {config.slow_rank} computes "
                      f"{config.slow_ms} ms longer per step from step {config.slow_from} "
                      "(a process-level stand-in for a throttled GPU)")
        master = free_port()
        env = {"C4_DEMO_STEPS": str(config.steps), "C4_DEMO_SLOW_RANK": str(config.slow_rank),
               "C4_DEMO_SLOW_MS": str(config.slow_ms),
               "C4_DEMO_SLOW_FROM": str(config.slow_from)}
        nodes = [torchrun_node(work, TRAIN, node=n, nnodes=2, nproc=2, master_port=master,
                               sidecar_socket=cars[n][1], job=job, env=env) for n in range(2)]
        services += nodes
        start = time.monotonic()
        with DaemonClient(f"127.0.0.1:{port}") as client:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while any(n.running() for n in nodes):
                    if time.monotonic() - start > config.timeout_s:
                        console.print("[red]the job did not finish in time[/red]")
                        return 1
                    live.update(_view(client, job, time.monotonic() - start))
                    time.sleep(0.5)
                time.sleep(2.0)  # the last batches and one more round of the detectors
                live.update(_view(client, job, time.monotonic() - start))
            failed = [n for n in nodes if n.proc and n.proc.returncode != 0]
            if failed:
                console.print("[red]the training job failed:[/red]\n" + failed[0].output()[-2000:])
                return 1
            console.print("[bold]4.[/bold] what arrived: `c4 ops` on rank "
                          f"{config.slow_rank}, first calls")
            cols = client.ops(job, rank=config.slow_rank, limit=8)
            t = Table()
            for col in ("rank", "pg", "seq", "op", "bytes", "duration ms"):
                t.add_column(col)
            names = cols.strings
            for r, g, q, o, b, te, tx in zip(*(cols[k].tolist() for k in (
                    "rank", "pg", "seq", "op", "nbytes", "t_enter_ns", "t_end_ns"))):
                t.add_row(str(r), names[g], str(q), names[o], f"{b:,}",
                          f"{(tx - te) / 1e6:.2f}")
            console.print(t)
            faults = client.faults(job)
            console.print(f"[bold]5.[/bold] {len(faults)} fault report(s) for the job; "
                          f"`c4 faults show ID --daemon 127.0.0.1:{port}` shows the evidence")
        return 0
    finally:
        for svc in reversed(services):
            svc.stop(timeout=15)
        if config.keep:
            console.print(f"logs and data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
