"""The hard cases (issue 22): faults that come and go, faults older than the recording, several
faults at once, and healthy runs under heavy benign noise, on every fabric. Prints a table per
fabric and size; ``--json FILE`` writes the full results.

    python -m bench.accuracy.hard --gpus 512 --seeds 2
    python -m bench.accuracy.hard --gpus 512,4096 --fabric all --seeds 1
    python -m bench.accuracy.hard --gpus 512 --mode stream            # online latency
    python -m bench.accuracy.hard --gpus 512 --sample 16 --layers 16  # reduced telemetry
    python -m bench.accuracy.hard --gpus 512 --no-conns --families intermittent,healthy

Rows (``--families``):

* ``int <kind>``: one slow fault of each kind (GPU, host, NIC, link, switch) from an onset
  early in the run, 2-4x slower when active, active one iteration in 2, 3, 4 or 5, or at random
  (``duty=P``, P in 0.2-0.5): seeds cycle through those five patterns, shifted per kind, so five
  seeds give every kind every pattern. Links alternate cables and uplinks, switches the tiers
  the job's traffic crosses.
* ``start <kind>``: one slow fault of each kind active from the first iteration (1.5-3x),
  before any healthy past could be learnt.
* ``multi2``, ``multi3``: two or three slow faults of different kinds at once, on components
  that share no host and no connection (else one fault's evidence is the other's), each from
  mid-run on (1.5-3x), from the first iteration (1.5-3x) or one iteration in three (2-4x),
  rotated per fault and seed.
* ``healthy``: no fault, five times the one-off pauses (GC), a checkpoint every 7 iterations
  and three times the transient congestion; ``healthy ecmp``: the same on a fabric of four
  hosts per leaf (as many spines), whose data-parallel rings all cross spines and collide.

Columns as in ``bench.accuracy.run``, and ``occ``: occurrences of an intermittent fault (its
active iterations since the onset) until the report, median and worst (``--mode stream``: when
the report first appeared, the online latency; trace mode: its ``first_seen_ns``, the evidence
latency); ``all%``: runs whose every fault is named top-1 (or tied with the ground truth's
equivalents).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any, TextIO

import numpy as np

from bench.accuracy.run import _score_of, run_one
from bench.accuracy.scenarios import Scenario, base_config, fabric_targets
from bench.accuracy.score import Row, summarize
from c4.topology.fabrics import FABRICS
from diagnosis.sim.config import FaultSpec, SimConfig, SimError

KINDS = ("slow_gpu", "slow_host", "slow_nic", "slow_link", "slow_switch")
FAMILIES = ("intermittent", "start", "multi", "healthy")
#: intermittent patterns: (every, on), or a random duty
PATTERNS: tuple[tuple[int, int] | str, ...] = ((2, 1), (3, 1), (4, 1), (5, 1), "random")
TARGET_TOP1 = 95.0
TARGET_OCCURRENCES = 5
ITERATIONS = 40


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def _target(kind: str, k: int, base: SimConfig) -> str:
    comp = {"slow_link": "link", "slow_switch": "switch"}.get(kind)
    if comp is None:
        return "auto"
    links, tiers = fabric_targets(base)
    pool = links if comp == "link" else tiers
    return pool[k % len(pool)] if pool else "auto"


def intermittent(kind: str, k: int, base: SimConfig, rng: np.random.Generator) -> FaultSpec:
    """A 2-4x slow fault active one iteration in 2..5 (or at random), from an onset that leaves
    five occurrences of the sparsest pattern in the run."""
    pattern = PATTERNS[(k + KINDS.index(kind)) % len(PATTERNS)]
    onset = int(rng.integers(6, 9))
    slow = round(float(rng.uniform(2.0, 4.0)), 3)
    target = _target(kind, k, base)
    if pattern == "random":
        duty = round(float(rng.uniform(0.2, 0.5)), 2)
        return FaultSpec(kind, target, onset, slow=slow, duty=duty)
    every, on = pattern
    return FaultSpec(kind, target, onset, slow=slow, every=every, on=on)


def from_start(kind: str, k: int, base: SimConfig, rng: np.random.Generator) -> FaultSpec:
    return FaultSpec(kind, _target(kind, k, base), 0,
                     slow=round(float(rng.uniform(1.5, 3.0)), 3))


def _apart(cfg: SimConfig) -> bool:
    """Whether the faults of ``cfg`` share no host (a GPU's or host's, a NIC's or its cable's)
    and no connection: else one fault's evidence is the other's, and naming one of them for
    both is no miss of the detector."""
    from diagnosis.sim.model import Simulation

    try:
        sim = Simulation(cfg)
    except SimError:
        return False
    lay, net = sim.lay, sim.conns
    nic_host = {lay.nic[r]: lay.hosts[lay.host_of[r]] for r in range(lay.world)}
    hosts: list[set[str]] = []
    crossing: list[np.ndarray] = []
    for f in sim.faults:
        mine: set[str] = {lay.hosts[lay.host_of[r]] for r in f.ranks.tolist()}
        if f.network:
            mine |= {nic_host[n] for lid in (net.link_ids[i] for i in f.links.tolist())
                     for n in lid.split("~") if n in nic_host and f.kind != "slow_switch"}
            if f.kind == "slow_nic":
                mine.add(nic_host.get(f.component["id"], f.component["id"]))
            crossing.append(net.crossing(f.links))
        hosts.append(mine)
    for i, a in enumerate(hosts):
        for b in hosts[i + 1:]:
            if a & b:
                return False
    for i, a in enumerate(crossing):
        for b in crossing[i + 1:]:
            if (a & b).any():
                return False
    return True


#: how each fault of a ``multi`` run comes: from mid-run on, from the first iteration, or one
#: iteration in three (rotated per fault and seed)
MULTI_MODES = ("mid", "start", "intermittent")


def multi(n: int, gpus: int, k: int, base: SimConfig) -> tuple[SimConfig, int]:
    """``n`` slow faults of different kinds at once, on components apart (see ``_apart``), each
    from mid-run on, from the first iteration, or one iteration in three."""
    for attempt in range(40):
        seed = _seed(f"multi{n}", gpus, k, attempt)
        rng = np.random.default_rng(seed)
        kinds = [str(x) for x in rng.choice(KINDS, n, replace=False)]
        faults = []
        for j, kind in enumerate(kinds):
            mode = MULTI_MODES[(j + k) % len(MULTI_MODES)]
            onset = int(rng.integers(int(base.iterations * 0.3), int(base.iterations * 0.5)))
            slow = round(float(rng.uniform(1.5, 3.0)), 3)
            target = _target(kind, k + j, base)
            if mode == "start":
                faults.append(FaultSpec(kind, target, 0, slow=slow))
            elif mode == "intermittent":
                faults.append(FaultSpec(kind, target, int(rng.integers(6, 9)),
                                        slow=round(float(rng.uniform(2.0, 4.0)), 3),
                                        every=3, on=1))
            else:
                faults.append(FaultSpec(kind, target, onset, slow=slow))
        cfg = replace(base, seed=seed, faults=tuple(faults))
        if _apart(cfg):
            return cfg, attempt
    raise SimError(f"no {n} faults apart found for {gpus} GPUs on {base.fabric}")


def noisy(cfg: SimConfig) -> SimConfig:
    """Heavy benign noise: five times the one-off pauses, a checkpoint every 7 iterations,
    three times the transient congestion."""
    return replace(cfg, gc_rate=5 * cfg.gc_rate, checkpoint_every=7,
                   congestion_rate=3 * cfg.congestion_rate)


def scenarios(sizes: list[int], seeds: int, fabric: str, families: tuple[str, ...],
              conns: bool = True, paths: bool = True, layers: int = 1,
              kinds: tuple[str, ...] = KINDS) -> list[Scenario]:
    out: list[Scenario] = []
    for gpus in sizes:
        base = replace(base_config(gpus, False, conns, fabric, paths=paths, layers=layers),
                       iterations=ITERATIONS, job=f"hard{gpus}")
        for k in range(seeds):
            if "intermittent" in families:
                for kind in kinds:
                    seed = _seed("int", kind, gpus, k)
                    f = intermittent(kind, k, base, np.random.default_rng(seed))
                    out.append(Scenario(f"int-{kind}-{gpus}-{k}", f"int {kind}", gpus,
                                        replace(base, seed=seed, faults=(f,))))
            if "start" in families:
                for kind in kinds:
                    seed = _seed("start", kind, gpus, k)
                    f = from_start(kind, k, base, np.random.default_rng(seed))
                    out.append(Scenario(f"start-{kind}-{gpus}-{k}", f"start {kind}", gpus,
                                        replace(base, seed=seed, faults=(f,))))
            if "multi" in families:
                for n in (2, 3):
                    cfg, _ = multi(n, gpus, k, base)
                    out.append(Scenario(f"multi{n}-{gpus}-{k}", f"multi{n}", gpus, cfg))
            if "healthy" in families:
                seed = _seed("healthy", gpus, k)
                out.append(Scenario(f"healthy-{gpus}-{k}", "healthy", gpus,
                                    noisy(replace(base, seed=seed))))
                if fabric != "single_switch":
                    ecmp = replace(base, seed=_seed("healthy-ecmp", gpus, k), hosts_per_leaf=4)
                    out.append(Scenario(f"healthy-ecmp-{gpus}-{k}", "healthy ecmp", gpus,
                                        noisy(ecmp)))
    return out


def occurrences(fault: dict[str, Any], latency_iters: int | None) -> int | None:
    """Active iterations of a fault from its onset through the iteration its report came in."""
    if latency_iters is None:
        return None
    onset = int(fault["onset_iteration"])
    last = onset + int(latency_iters)
    inter = fault.get("intermittent") or {}
    if "active" in inter:
        return sum(1 for i in inter["active"] if i <= last)
    every, on = int(inter.get("every") or 1), int(inter.get("on") or 1)
    return sum(1 for i in range(onset, last + 1) if (i - onset) % every < on)


def _row_extra(done: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (gpus, label): occurrences until the report, and runs with every fault named."""
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for d in done:
        cell = out.setdefault((d["gpus"], d["label"]), {"occ": [], "all": 0, "runs": 0})
        cell["runs"] += 1
        scores = d["score"]["faults"]
        obs = [s for s in scores if s["observable"]]
        cell["all"] += bool(obs) and all(s["top1"] or s["ambiguous"] for s in obs)
        for f, s in zip(d["faults"], scores):
            if f.get("intermittent") and s["top3"]:
                occ = occurrences(f, s["latency_iters"])
                if occ is not None:
                    cell["occ"].append(occ)
    return out


def print_rows(rows: list[Row], extra: dict[tuple[int, str], dict[str, Any]],
               out: TextIO | None = None) -> None:
    out = out or sys.stdout
    head = (f"{'gpus':>5} {'row':<17} {'runs':>4} {'det%':>6} {'top1%':>6} {'top3%':>6} "
            f"{'amb':>3} {'all%':>6} {'target':>6} {'occ':>7} {'lat s':>6} {'false':>5}")
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        j = r.to_json()
        e = extra.get((r.gpus, r.label), {"occ": [], "all": 0, "runs": 0})
        occ = (f"{int(np.median(e['occ']))}/{max(e['occ'])}" if e["occ"] else "-")
        lat = "-" if j["latency_s_median"] is None else f"{j['latency_s_median']:.1f}"

        def pct(v: float | None) -> str:
            return "   -" if v is None else f"{v:5.1f}"
        healthy = r.label.startswith("healthy")
        tgt = "0 fr" if healthy else f"{TARGET_TOP1:.0f}"
        every = None if healthy or not e["runs"] else 100.0 * e["all"] / e["runs"]
        unobs = f" ({r.unobservable} unobservable)" if r.unobservable else ""
        print(f"{r.gpus:>5} {r.label:<17} {r.scenarios:>4} {pct(j['detected_pct']):>6} "
              f"{pct(j['top1_pct']):>6} {pct(j['top3_pct']):>6} {r.ambiguous:>3} "
              f"{pct(every):>6} {tgt:>6} {occ:>7} {lat:>6} {r.false_reports:>5}{unobs}",
              file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="512", help="comma-separated job sizes")
    ap.add_argument("--seeds", type=int, default=2, help="runs per row and size")
    ap.add_argument("--fabric", default="rail",
                    help=f"comma-separated fabrics ({', '.join(FABRICS)}), or all")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help=f"comma-separated rows to run: {', '.join(FAMILIES)}")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="comma-separated fault kinds of the int and start rows")
    ap.add_argument("--no-conns", action="store_true", help="traces without conn records")
    ap.add_argument("--no-paths", action="store_true",
                    help="conn records without the route each transfer took")
    ap.add_argument("--layers", type=int, default=1, help="transformer layers per stage")
    ap.add_argument("--sample", type=int, default=1,
                    help="K > 1: the reduced telemetry of format version 2 (c4 sim --sample "
                    "K; in stream mode, the edge's records)")
    ap.add_argument("--window-ms", type=float, default=1000.0,
                    help="window of the reduced traces' progress and linkstat records")
    ap.add_argument("--mode", choices=("trace", "cli", "stream"), default="trace",
                    help="as bench.accuracy.run: stream gives the online latency")
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run in parallel")
    ap.add_argument("--json", help="write full results here")
    ap.add_argument("--failures", type=int, default=8, help="failed runs listed per row")
    args = ap.parse_args(argv)
    fabrics = list(FABRICS) if args.fabric == "all" else \
        [f for f in args.fabric.split(",") if f]
    for f in fabrics:
        if f not in FABRICS:
            ap.error(f"--fabric {f!r} is not one of {', '.join(FABRICS)}")
    families = tuple(f for f in args.families.split(",") if f)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if set(families) - set(FAMILIES) or set(kinds) - set(KINDS):
        ap.error(f"--families from {', '.join(FAMILIES)}; --kinds from {', '.join(KINDS)}")
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(x) for x in args.gpus.split(",") if x]
    results: dict[str, Any] = {"mode": args.mode, "sample": args.sample,
                               "conns": not args.no_conns, "paths": not args.no_paths,
                               "layers": args.layers, "fabrics": {}}
    t0 = time.perf_counter()
    for fabric in fabrics:
        todo = scenarios(sizes, args.seeds, fabric, families, conns=not args.no_conns,
                         paths=not args.no_paths, layers=args.layers, kinds=kinds)
        if args.sample > 1:
            todo = [replace(sc, name=f"{sc.name}-k{args.sample}",
                            cfg=replace(sc.cfg, sample=args.sample, window_ms=args.window_ms))
                    for sc in todo]
        with tempfile.TemporaryDirectory(prefix="c4-hard-") as work:
            if args.jobs > 1:
                with ProcessPoolExecutor(args.jobs) as pool:
                    done = list(pool.map(run_one, todo, [args.mode] * len(todo),
                                         [work] * len(todo)))
            else:
                done = []
                for sc in todo:
                    done.append(run_one(sc, args.mode, work))
                    print(f"  {fabric:<13} {sc.name:<28} {done[-1]['sim_s']:5.1f}s sim "
                          f"{done[-1]['analyze_s']:6.1f}s analyze "
                          f"{len(done[-1]['reports'])} reports", file=sys.stderr)
        rows = sorted(summarize((d["label"], d["gpus"], _score_of(d), d["name"]) for d in done),
                      key=lambda r: (r.gpus, r.label.startswith("healthy"), r.label))
        extra = _row_extra(done)
        what = (f"fabric {fabric}, mode {args.mode}, conns "
                f"{'off' if args.no_conns else 'on' + (' (no paths)' if args.no_paths else '')}"
                f", {args.layers} layer(s) per stage"
                + (f", reduced trace K={args.sample}" if args.sample > 1 else ", full trace"))
        print(f"\nhard cases: {len(done)} runs, {what}\n")
        print_rows(rows, extra)
        shown = [r for r in rows if r.failures]
        if shown:
            print("\nmisses and false reports:")
            for r in shown:
                for f in r.failures[:args.failures]:
                    print(f"  {r.gpus} {r.label}: {f}")
        for d in [d for d in done if d["analyze_error"]][:3]:
            print(f"analyze failed on {d['name']}:\n{d['analyze_error']}")
        results["fabrics"][fabric] = {"rows": [r.to_json() for r in rows],
                                      "extra": {f"{g} {lab}": v for (g, lab), v in
                                                extra.items()},
                                      "scenarios": done}
    print(f"\n{time.perf_counter() - t0:.0f} s. det/top1/top3: % of observable faults (top1: "
          "of those not ambiguous); amb: tied first with components no timing can tell apart; "
          "all%: runs with every fault top-1; occ: occurrences of an intermittent fault until "
          "its report, median/worst (target <= 5; online only with --mode stream); false: "
          "reports explained by no fault (target: 0)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
