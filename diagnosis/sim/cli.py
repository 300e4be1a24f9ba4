"""``c4 sim``: simulate a training job and write its trace, topology and ground truth."""

from __future__ import annotations

from pathlib import Path

import typer

from c4.topology.fabrics import FABRICS
from diagnosis.sim.config import FAULT_KINDS

_KINDS = ", ".join(FAULT_KINDS)
_FABRICS = "|".join(FABRICS)


def register(app: typer.Typer) -> None:
    app.command("sim", help="Simulate a 3D-parallel training job (with injected faults) and "
                "write trace.jsonl (or NCCL's own telemetry: --as), topology.json and "
                "truth.json into --out.")(sim)


def sim(
    out: Path = typer.Option(..., "--out", "-o", help="Directory for trace.jsonl, topology.json "
                             "and truth.json (created if missing)."),
    gpus: int = typer.Option(512, help="World size (GPUs, one rank each)."),
    gpus_per_host: int = typer.Option(8, help="GPUs per host."),
    tp: int = typer.Option(8, help="Tensor-parallel size (inside a host)."),
    pp: int = typer.Option(4, help="Pipeline stages (across hosts)."),
    iterations: int = typer.Option(40, help="Training iterations to simulate."),
    microbatches: int = typer.Option(4, help="Microbatches per iteration (pipeline)."),
    layers: int = typer.Option(1, help="Transformer layers per pipeline stage: 1, one "
                               "tensor-parallel all-reduce per pass; N > 1, a sequence-parallel "
                               "all-gather and reduce-scatter per block, two blocks per layer "
                               "(16: a few hundred calls/s per rank)."),
    fault: list[str] = typer.Option(
        [], "--fault",
        help="Fault to inject, repeatable: "
             "KIND[:TARGET][@ONSET][,slow=F][,end=I][,every=K,on=J][,duty=P]."
             f" KIND: {_KINDS}. TARGET: auto, cable/uplink (links), "
             "leaf/spine/core (switches), a topology id, or a rank (GPU faults). ONSET/END: "
             "iterations. slow: time multiplier (1.15 = 15% slower). every/on: intermittent; "
             "duty: slow at random, in each iteration with probability P."),
    seed: int = typer.Option(0, help="Seed: the same options and seed give the same files."),
    conns: bool = typer.Option(True, "--conns/--no-conns",
                               help="Emit conn records (one per transfer per connection)."),
    paths: bool = typer.Option(True, "--paths/--no-paths",
                               help="Give each conn record the route it took (without: as "
                               "collectors that cannot see the ECMP path of a flow)."),
    sample: int = typer.Option(0, help="Write the reduced trace of format version 2, as the "
                               "edge ships it: calls sampled 1 in K, progress, linkstat "
                               "instead of conn, NIC port records (0: version 1, every call)."),
    window_ms: float = typer.Option(1000.0, help="Window of the reduced trace's progress and "
                                    "linkstat records (with --sample)."),
    gzip: bool = typer.Option(False, "--gzip", help="Write trace.jsonl.gz instead (for "
                              "storage: c4 analyze reads plain JSON Lines)."),
    order: str = typer.Option("complete", help="Line order: 'complete' (as collectors ship "
                              "records: by completion time) or 'enter' (each iteration's "
                              "records by entry time)."),
    fabric: str = typer.Option("rail", help=f"Fabric: {_FABRICS}. rail: rail-optimized "
                               "leaf/spine; dual_port: the same with two ports per NIC; tor: "
                               "all NICs of a host on one top-of-rack leaf; three_tier: pods "
                               "of rail-optimized leaf/spine joined by a core; single_switch: "
                               "every NIC on one switch."),
    topology: Path | None = typer.Option(None, "--topology", help="Run on an imported "
                                         "topology (c4 topology import) instead of building "
                                         "--fabric: hosts of --gpus-per-host GPUs, each on a "
                                         "NIC cabled to a switch; hosts without GPUs get "
                                         "--gpus-per-host; links without capacity get "
                                         "--nic-gbps / --uplink-gbps (see diagnosis/sim/"
                                         "README.md)."),
    nics_per_host: int = typer.Option(0, help="NICs per host (0: one per GPU); fewer NICs "
                                      "than GPUs: GPU i shares NIC i*nics/gpus."),
    hosts_per_leaf: int = typer.Option(16, help="Hosts under one leaf switch (per rail on "
                                       "rail fabrics; on three_tier also a pod's hosts)."),
    nic_gbps: float = typer.Option(400.0, help="NIC and cable speed."),
    uplink_gbps: float = typer.Option(0.0, help="Switch-to-switch link speed (0: "
                                      "non-blocking)."),
    gc_rate: float = typer.Option(0.002, help="One-off pauses per rank per iteration."),
    checkpoint_every: int = typer.Option(25, help="Slow checkpoint step every N iterations "
                                         "(0: never)."),
    hang_wait: float = typer.Option(60.0, help="Seconds recorded after the job stops moving."),
    job: str = typer.Option("sim", help="Job name in the trace's meta record."),
    as_: list[str] = typer.Option(["trace"], "--as", help="Formats to write the run in "
                                  "(repeatable or comma-separated): trace (c4's, trace.jsonl), "
                                  "nccl-inspector (NCCL Inspector files, one per process, in "
                                  "nccl-inspector/), ncclras (ncclras -f json reports taken "
                                  "every --ras-every s once the job stood still, and at the "
                                  "end, in ncclras.json)."),
    inspector_verbose: bool = typer.Option(True, "--inspector-verbose/--no-inspector-verbose",
                                           help="Inspector lines with their per-call times "
                                           "(NCCL_INSPECTOR_DUMP_VERBOSE=1, as c4 run sets)."),
    dump_interval_ms: float = typer.Option(100.0, help="The Inspector's dump interval."),
    ras_every: float = typer.Option(10.0, help="Seconds between the ncclras reports."),
    health: bool = typer.Option(False, "--health", help="Append node health series (GPU, NIC "
                                "port, host PSI samples every --health-interval) as health "
                                "records; see diagnosis/sim/health.py."),
    health_cause: str = typer.Option("", help="Plant a health cause behind the run's fault: "
                                     "thermal, pcie_downtrain, ecc_storm (slow_gpu), "
                                     "cpu_contention (slow_host), noisy_ib_port (slow_nic). "
                                     "Implies --health."),
    health_decoys: int = typer.Option(0, help="Causes planted on components without a timing "
                                      "fault (never to be named as a cause). Implies --health."),
    health_interval: float = typer.Option(1.0, help="Seconds between health samples."),
) -> None:
    from c4.output import make_console
    from diagnosis.sim.config import FaultSpec, SimConfig, SimError
    from diagnosis.sim.formats import sinks_for
    from diagnosis.sim.run import simulate

    formats = [f.strip() for item in as_ for f in item.split(",") if f.strip()]
    try:
        sinks = sinks_for(formats, verbose=inspector_verbose,
                          dump_interval_us=int(dump_interval_ms * 1000), ras_every_s=ras_every)
        if sinks and sample:
            raise SimError("--as nccl-inspector/ncclras writes every call: leave out --sample")
        cfg = SimConfig(gpus=gpus, gpus_per_host=gpus_per_host, tp=tp, pp=pp,
                        iterations=iterations, microbatches=microbatches, layers=layers,
                        seed=seed, sample=sample or None, window_ms=window_ms,
                        conns=conns, paths=paths,
                        faults=tuple(FaultSpec.parse(f) for f in fault),
                        fabric=fabric, topology=None if topology is None else str(topology),
                        nics_per_host=nics_per_host or None,
                        hosts_per_leaf=hosts_per_leaf, nic_gbps=nic_gbps,
                        uplink_gbps=uplink_gbps or None, gc_rate=gc_rate,
                        checkpoint_every=checkpoint_every, hang_wait_s=hang_wait, job=job)
        res = simulate(cfg, out, compress=gzip, order=order, sinks=sinks,
                       trace="trace" in formats)
        if health or health_cause or health_decoys:
            if "trace" not in formats:
                raise SimError("--health appends to trace.jsonl: give --as trace too")
            if gzip:
                raise SimError("--health appends to trace.jsonl: leave out --gzip")
            from diagnosis.sim.health import add_health

            add_health(out, cause=health_cause or None, decoys=health_decoys,
                       interval_s=health_interval, seed=seed)
    except SimError as exc:
        raise typer.BadParameter(str(exc)) from None
    con = make_console()
    counts = ", ".join(f"{n:,} {kind}" for kind, n in res.records.items() if n)
    con.print(f"{res.iterations} iterations, {res.calls_per_s_per_rank:.0f} calls/s per rank; "
              f"records: {counts}")
    con.print(f"{'trace' if 'trace' in formats else 'output':<8} {res.trace}\n"
              f"topology {res.topology}\ntruth    {res.truth}")
