"""Edge cost: one node of real ranks through the real hook and sidecar, at K = 1, 16, 64.

    python -m bench.scale.edge [--ranks 8] [--rate 400] [--samples 1,16,64] [--seconds 20]

A gloo job of ``--ranks`` ranks (``tests/support/steady_job.py``: small all_reduces on the world
and on a pair group, ``--rate`` calls per second per rank) runs under `c4 run` with one real
sidecar and a daemon that samples every job at the factor under test (``c4 daemon --sample``).
Once the factor is in force, over ``--seconds``:

- CPU per node in % of one core: the ranks' CPU minus that of the same job without c4
  (the collectors' extra, measured once at the start), the sidecar's, and their sum;
- records and bytes leaving the node per second (the sidecar's ``records_out``,
  ``bytes_out``), and the calls the ranks made (their collectors' counters).

With ``--backend nccl`` the ranks run NCCL on the GPUs (the hook's CUDA timing path); with
``--inspector PLUGIN`` a last row runs the same job without the hook, NCCL's Inspector writing
every call, and the sidecar following its directory (its calls/s are the Inspector's lines).

Target (issue 15): the node's extra CPU at most 5% of one core; following the Inspector
(issue 18): at most 2% of one core. On a machine with fewer cores
than ranks the ranks compete for CPU with each other and with the daemon; the calls per second
achieved are printed beside the target rate.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "steady_job.py"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _pids(log: Path, ranks: int, timeout: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [log / f"rank{r}.pid" for r in range(ranks)]
        if all(f.exists() and f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.2)
    raise TimeoutError(f"the ranks did not start within {timeout:.0f} s (see {log})")


def _job(workdir: Path, name: str, ranks: int, rate: float, seconds: float,
         c4_args: Sequence[str] | None, backend: str):
    """The job under ``c4 run --job NAME C4_ARGS`` (None: without c4)."""
    from c4.processes import Service, c4_command

    log = workdir / name
    env = {"C4_TEST_LOG": str(log), "C4_TEST_RATE": str(rate / 2),
           "C4_TEST_SECONDS": str(seconds), "OMP_NUM_THREADS": "1",
           "C4_TEST_BACKEND": backend,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    if backend == "nccl":
        # one machine: NCCL's socket transport over loopback between the ranks' "hosts"
        env.update(NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(ranks), str(SCRIPT)]
    if c4_args is None:
        cmd = torchrun
    else:
        cmd = [*c4_command("run", "--job", name, *c4_args, "--"), *torchrun]
    return Service(cmd, workdir / f"{name}.log", env=env).start(), log


def _kill(pids: list[int]) -> None:
    """torchrun starts each worker in a session of its own: they outlive a kill of torchrun's
    process group, so they go by pid."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _stop(job: Any, pids: list[int], *services: Any) -> None:
    """The job (torchrun, its ranks by pid), then the sidecar and daemon."""
    job.kill()
    _kill(pids)
    for svc in services:
        svc.stop()


def _window(pids: list[int], seconds: float) -> float:
    """CPU seconds the processes use over ``seconds`` of wall time."""
    before = sum(cpu_s(p) for p in pids)
    time.sleep(seconds)
    return sum(cpu_s(p) for p in pids) - before


def baseline(workdir: Path, ranks: int, rate: float, seconds: float, warmup: float,
             backend: str, name: str = "plain") -> float:
    """The ranks' CPU (cores) without c4."""
    svc, log = _job(workdir, name, ranks, rate, warmup + seconds + 30, None, backend)
    pids: list[int] = []
    try:
        pids = _pids(log, ranks)
        time.sleep(warmup)
        return _window(pids, seconds) / seconds
    finally:
        svc.kill()
        _kill(pids)


def measure(workdir: Path, k: int, ranks: int, rate: float, seconds: float,
            warmup: float, backend: str) -> dict[str, float]:
    from c4.demo.services import start_daemon, start_sidecar
    from c4.processes import free_port, wait_for
    from c4.proto.codec import collector_counts
    from diagnosis.client import DaemonClient

    port = free_port()
    # the steady stream only: a report would pull detail (see `c4 faults list` for those)
    extra = ["--analyze-interval", "1", "--no-detail"] + (
        ["--sample", str(k)] if k > 1 else ["--job-records-per-s", "0"])
    daemon = start_daemon(workdir, port, name=f"daemon-k{k}", extra=extra)
    car, sock = start_sidecar(workdir, port, "node0", name=f"sidecar-k{k}")
    job = f"edge-k{k}"
    svc, log = _job(workdir, job, ranks, rate, 300, ["--sidecar-socket", str(sock)], backend)
    pids: list[int] = []
    try:
        pids = _pids(log, ranks)
        with DaemonClient(f"127.0.0.1:{port}") as client:
            if k > 1:
                sched = wait_for(lambda: [c.schedule for c in client.reduced(job)
                                          if c.WhichOneof("body") == "schedule"], 120,
                                 what="the sampling schedule")[-1]
                start = max((s.from_seq for s in sched.steps), default=0)
                wait_for(lambda: int(client.ops(job, limit=0)["seq"].max()) > start, 120,
                         what="calls past the switch")
            time.sleep(warmup)

            def counters() -> tuple[int, int, int]:
                st = client.status().sidecars[0].stats
                recorded = sum(int(c["recorded"].sum()) for _, _, c in collector_counts(st))
                return st.records_out, st.bytes_out, recorded

            c0 = counters()
            ranks_cpu0, car_cpu0 = sum(cpu_s(p) for p in pids), cpu_s(car.proc.pid)
            d0 = cpu_s(daemon.proc.pid)
            t0 = time.monotonic()
            time.sleep(seconds)
            dt = time.monotonic() - t0
            c1 = counters()
            ranks_cpu = (sum(cpu_s(p) for p in pids) - ranks_cpu0) / dt
            car_cpu = (cpu_s(car.proc.pid) - car_cpu0) / dt
            daemon_cpu = (cpu_s(daemon.proc.pid) - d0) / dt
        return {"k": k, "calls": (c1[2] - c0[2]) / dt / ranks, "ranks_cpu": ranks_cpu,
                "sidecar_cpu": car_cpu, "daemon_cpu": daemon_cpu,
                "records": (c1[0] - c0[0]) / dt, "bytes": (c1[1] - c0[1]) / dt}
    finally:
        _stop(svc, pids, car, daemon)


def _lines(d: Path) -> int:
    return sum(f.read_bytes().count(b"\n") for f in d.rglob("*") if f.is_file())


def measure_inspector(workdir: Path, plugin: str, ranks: int, rate: float, seconds: float,
                      warmup: float) -> dict[str, float]:
    """NCCL's Inspector instead of the hook (``c4 run --no-collect --nccl-inspector``, every
    call written): the sidecar following its dump directory, and the plugin's cost in the
    ranks."""
    from c4.demo.services import start_daemon, start_sidecar
    from c4.processes import free_port, wait_for
    from diagnosis.client import DaemonClient

    port = free_port()
    daemon = start_daemon(workdir, port, name="daemon-insp",
                          extra=["--analyze-interval", "1", "--no-detail",
                                 "--job-records-per-s", "0"])
    job = "edge-insp"
    dump = workdir / "inspector"
    dump.mkdir()
    car, _ = start_sidecar(workdir, port, "node0", name="sidecar-insp",
                           extra=["--nccl-job", job, "--nccl-inspector", str(dump)])
    svc, log = _job(workdir, job, ranks, rate, 300,
                    ["--no-collect", f"--nccl-inspector={dump}",
                     "--nccl-profiler-plugin", plugin], "nccl")
    pids: list[int] = []
    try:
        pids = _pids(log, ranks)
        wait_for(lambda: _lines(dump) > 0, 120, what=f"the Inspector's lines in {dump}")
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: client.status().sidecars
                     and client.status().sidecars[0].stats.records_out > 0, 120,
                     what="records from the followed Inspector directory")
            time.sleep(warmup)

            def counters() -> tuple[int, int]:
                st = client.status().sidecars[0].stats
                return st.records_out, st.bytes_out

            c0, lines0 = counters(), _lines(dump)
            ranks_cpu0, car_cpu0 = sum(cpu_s(p) for p in pids), cpu_s(car.proc.pid)
            t0 = time.monotonic()
            time.sleep(seconds)
            dt = time.monotonic() - t0
            c1, lines1 = counters(), _lines(dump)
            return {"k": 1, "calls": (lines1 - lines0) / dt / ranks,
                    "ranks_cpu": (sum(cpu_s(p) for p in pids) - ranks_cpu0) / dt,
                    "sidecar_cpu": (cpu_s(car.proc.pid) - car_cpu0) / dt, "daemon_cpu": 0.0,
                    "records": (c1[0] - c0[0]) / dt, "bytes": (c1[1] - c0[1]) / dt}
    finally:
        _stop(svc, pids, car, daemon)


def measure_paced(workdir: Path, k: int, ranks: int, rate: float, seconds: float,
                  warmup: float) -> dict[str, float]:
    """The sidecar alone at the full rate: ranks played by paced drivers of the collector wire
    (``tests/support/paced.py``) in this process, so the machine's cores are not what limits
    the calls made; the collectors' own cost is ``bench.hook_overhead``'s."""
    from c4.demo.services import start_daemon, start_sidecar
    from c4.processes import free_port, wait_for
    from diagnosis.client import DaemonClient
    from tests.support.paced import PacedJob

    port = free_port()
    extra = ["--analyze-interval", "1", "--no-detail"] + (
        ["--sample", str(k)] if k > 1 else ["--job-records-per-s", "0"])
    daemon = start_daemon(workdir, port, name=f"daemon-paced-k{k}", extra=extra)
    car, sock = start_sidecar(workdir, port, "node0", name=f"sidecar-paced-k{k}")
    job = PacedJob(sock, f"paced-k{k}", ranks=ranks, host="node0", pgs=("0",), rate=rate).start()
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: client.status().sidecars, 60, what="the sidecar's stats")
            time.sleep(warmup)

            def counters() -> tuple[int, int]:
                st = client.status().sidecars[0].stats
                return st.records_out, st.bytes_out

            c0, cpu0, t0 = counters(), cpu_s(car.proc.pid), time.monotonic()
            time.sleep(seconds)
            dt = time.monotonic() - t0
            c1 = counters()
            return {"k": k, "calls": rate, "ranks_cpu": 0.0,
                    "sidecar_cpu": (cpu_s(car.proc.pid) - cpu0) / dt,
                    "daemon_cpu": 0.0, "records": (c1[0] - c0[0]) / dt,
                    "bytes": (c1[1] - c0[1]) / dt}
    finally:
        job.close()
        car.stop()
        daemon.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=400.0, help="calls per second per rank")
    ap.add_argument("--samples", default="1,16,64", help="sampling factors to measure")
    ap.add_argument("--seconds", type=float, default=20.0, help="measuring window")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--driver", choices=("torch", "paced"), default="torch",
                    help="torch: real gloo ranks through the hook; paced: wire drivers at the "
                         "full rate into the real sidecar (its cost alone)")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                    help="torch driver: gloo on the CPU, or NCCL on the GPUs with the hook's "
                         "CUDA timing path")
    ap.add_argument("--inspector", metavar="PLUGIN", default="",
                    help="also a row for NCCL's Inspector (this plugin library) written for "
                         "every call and followed by the sidecar, without the hook (nccl)")
    ap.add_argument("--logs", metavar="DIR", default="",
                    help="copy the run's logs (daemon, sidecar, job) here at the end")
    args = ap.parse_args()
    ks = [int(k) for k in args.samples.split(",")]
    what = f"{args.backend}, real hook and sidecar" if args.driver == "torch" else \
        "paced wire drivers into the real sidecar: its cost alone"
    print(f"\nedge cost: {args.ranks} ranks x {args.rate:g} calls/s ({what}), {args.seconds:g} s "
          "windows", flush=True)
    with tempfile.TemporaryDirectory(prefix="c4-edge-") as tmp:
        work = Path(tmp)
        try:
            _table(work, args, ks)
        finally:
            if args.logs:
                shutil.copytree(work, args.logs, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.sock", "*.db*"))


def _table(work: Path, args: argparse.Namespace, ks: list[int]) -> None:
    """Measures and prints one row at a time (a long run that fails keeps what it measured)."""
    plain = 0.0
    if args.driver == "torch":
        plain = baseline(work, args.ranks, args.rate, args.seconds, args.warmup, args.backend)
        print(f"ranks without c4: {100 * plain:.1f}% of a core", flush=True)
    head = ("K", "calls/s/rank", "ranks %", "collectors extra %", "sidecar %", "node extra %",
            "records/s out", "bytes/s out", "daemon %")
    print("\n" + " | ".join(head))
    print(" | ".join("---" for _ in head), flush=True)

    def row(label: object, r: dict[str, float]) -> None:
        extra = r["ranks_cpu"] - plain if args.driver == "torch" else 0.0
        print(f"{label} | {r['calls']:,.0f} | {100 * r['ranks_cpu']:.1f} | {100 * extra:.1f} | "
              f"{100 * r['sidecar_cpu']:.1f} | {100 * (extra + r['sidecar_cpu']):.1f} | "
              f"{r['records']:,.0f} | {r['bytes']:,.0f} | {100 * r['daemon_cpu']:.1f}",
              flush=True)

    for k in ks:
        if args.driver == "paced":
            row(k, measure_paced(work, k, args.ranks, args.rate, args.seconds, args.warmup))
        else:
            row(k, measure(work, k, args.ranks, args.rate, args.seconds, args.warmup,
                           args.backend))
    if args.inspector and args.driver == "torch":
        row("Inspector", measure_inspector(work, args.inspector, args.ranks, args.rate,
                                           args.seconds, args.warmup))
    if args.driver == "torch":
        again = baseline(work, args.ranks, args.rate, args.seconds, args.warmup, args.backend,
                         "plain-again")
        print(f"\nranks without c4, measured again at the end: {100 * again:.1f}% of a core "
              f"(first: {100 * plain:.1f}%; the difference is the noise of the extra columns)",
              flush=True)


if __name__ == "__main__":
    main()
