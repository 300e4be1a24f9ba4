"""Accuracy bench: seeded simulated faults at 512 and 4,096 GPUs, run through ``c4 analyze``,
scored against the ground truth. Prints a table; ``--json FILE`` writes the full results.

    python -m bench.accuracy.run --quick
    python -m bench.accuracy.run --gpus 512,4096 --seeds 4 --json results.json
    python -m bench.accuracy.run --quick --fabric three_tier --nics-per-host 4
    python -m bench.accuracy.run --quick --topology fattree.json   # c4 topology import output
    python -m bench.accuracy.run --gpus 512 --seeds 2 --drop peer
    python -m bench.accuracy.run --quick --sample 1,16,64 --layers 16
    python -m bench.accuracy.run --gpus 512 --seeds 2 --layers 16 --sample 1,16,64 --mode stream
    python -m bench.accuracy.run --quick --as trace,nccl-inspector,nccl-inspector+ncclras
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.accuracy.analyze import analyze_file, analyze_stream
from bench.accuracy.nccl import FORMATS, print_can_show, print_formats, run_nccl
from bench.accuracy.rewrite import DROPS, parse_drops, rewrite
from bench.accuracy.scenarios import JobShape, Scenario, scenarios
from bench.accuracy.score import latency_deltas, score_scenario, summarize
from bench.accuracy.table import TARGETS, print_comparison, print_table
from c4.topology.fabrics import FABRICS
from diagnosis.sim.config import FAULT_KINDS
from diagnosis.sim.run import simulate

__all__ = ["TARGETS", "main", "print_table", "run_one", "with_samples"]


def sample_of(sc: Scenario) -> int:
    return sc.cfg.sample or 1


def with_samples(todo: list[Scenario], samples: tuple[int, ...], window_ms: float
                 ) -> list[Scenario]:
    """Each scenario once per sampling factor, same seed: K = 1 the full trace (version 1),
    K > 1 the reduced one (version 2, ``c4 sim --sample K``)."""
    out = []
    for sc in todo:
        for k in samples:
            if k == 1:
                out.append(sc)
            else:
                out.append(replace(sc, name=f"{sc.name}-k{k}",
                                   cfg=replace(sc.cfg, sample=k, window_ms=window_ms)))
    return out


def run_one(sc: Scenario, mode: str, workdir: str,
            drops: tuple[str, ...] = (), fmt: str = "trace") -> dict[str, Any]:
    if fmt != "trace":
        return run_nccl(sc, fmt, workdir)
    t0 = time.perf_counter()
    trace_bytes = 0
    if mode == "stream":
        reports, truth = analyze_stream(sc.cfg)
        t_sim, t_an = 0.0, time.perf_counter() - t0
    else:
        out = Path(workdir) / sc.name
        res = simulate(sc.cfg, out)
        truth = json.loads(res.truth.read_text())
        trace = res.trace
        if drops:
            trace = res.trace.with_name("sparse.jsonl")
            rewrite(res.trace, trace, drops)
            res.trace.unlink()
        trace_bytes = trace.stat().st_size
        t_sim = time.perf_counter() - t0
        try:
            reports = analyze_file(trace, res.topology, cli=mode == "cli")
        except Exception:   # a crash is a result too: no reports, noted with where it was
            reports = []
            truth["analyze_error"] = traceback.format_exc()[-3000:]
        t_an = time.perf_counter() - t0 - t_sim
        trace.unlink()
    score = score_scenario(truth, reports)
    return {"name": sc.name, "label": sc.label, "gpus": sc.gpus, "seed": sc.cfg.seed,
            "sample": sample_of(sc),
            "faults": truth["faults"], "iterations": truth["iterations"],
            "records": truth["records"], "trace_bytes": trace_bytes,
            "calls_per_s_per_rank": truth.get("calls_per_s_per_rank"), "score": asdict(score),
            "reports": [{k: r.get(k) for k in ("kind", "suspects", "first_seen_ns",
                                                  "detected_ns", "summary")} for r in reports],
            "analyze_error": truth.get("analyze_error"), "sim_s": t_sim, "analyze_s": t_an}


def _score_of(d: dict[str, Any]):
    from bench.accuracy.score import FaultScore, ScenarioScore
    s = d["score"]
    return ScenarioScore(tuple(FaultScore(**f) for f in s["faults"]), s["reports"],
                         s["false_reports"], s["iterations"], tuple(s["false_kinds"]))


def _shape(text: str) -> JobShape:
    if not text:
        return JobShape()
    try:
        gph, tp, pp, mb = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--shape {text!r}: give four integers GPH,TP,PP,MB, "
                         "e.g. 8,4,8,4") from None
    return JobShape(gpus_per_host=gph, tp=tp, pp=pp, microbatches=mb)


def _samples(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(dict.fromkeys(int(x) for x in text.split(",") if x))
    except ValueError:
        raise SystemExit(f"--sample {text!r}: give sampling factors, e.g. 1,16,64") from None
    if not ks or min(ks) < 1:
        raise SystemExit(f"--sample {text!r}: factors are integers >= 1")
    return ks


def _caption(k: int, done: list[dict[str, Any]], mode: str = "trace") -> str:
    """What the runs at factor ``k`` were: the records of a run's trace (in stream mode, those
    the engine was fed) and the trace's size."""
    what = "stream" if mode == "stream" else "trace"
    if k == 1:
        what = f"full {what} (version 1, every call)"
    else:
        what = (f"reduced {what} (version 2: calls sampled 1 in {k}, progress, linkstat, port"
                f"{', as the edge ships them' if mode == 'stream' else ''})")
    mine = [d for d in done if d["sample"] == k]
    lines = [sum(d["records"].values()) for d in mine]
    size = [d["trace_bytes"] for d in mine if d["trace_bytes"]]
    out = f"K={k}: {what}"
    if lines:
        out += f", {statistics.median(lines):,.0f} records"
    if size:
        out += f" ({statistics.median(size) / 1e6:,.1f} MB)"
    if lines:
        out += " per run (median)"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="512 GPUs, one scenario per fault kind, one healthy run")
    ap.add_argument("--gpus", default="512,4096", help="comma-separated job sizes")
    ap.add_argument("--seeds", type=int, default=4, help="scenarios per fault kind and size")
    ap.add_argument("--kinds", default="", help="comma-separated fault kinds (default: all)")
    ap.add_argument("--no-conns", action="store_true", help="traces without conn records")
    ap.add_argument("--fabric", choices=list(FABRICS), default="rail",
                    help="the simulated fabric (see diagnosis/sim/README.md)")
    ap.add_argument("--topology", type=Path, default=None,
                    help="run on an imported topology instead of --fabric (c4 sim --topology; "
                    "hosts without GPUs get the shape's GPUs per host)")
    ap.add_argument("--no-paths", action="store_true",
                    help="conn records without the route each transfer took (ECMP candidates "
                    "from the topology only, as most collectors)")
    ap.add_argument("--nics-per-host", type=int, default=None,
                    help="NICs per host (default: one per GPU); GPUs share NICs when fewer")
    ap.add_argument("--shape", default="", metavar="GPH,TP,PP,MB",
                    help="job layout: GPUs per host, tensor-parallel size, pipeline stages, "
                    "microbatches (default 8,8,4,2)")
    ap.add_argument("--layers", type=int, default=1,
                    help="transformer layers per stage (c4 sim --layers): 1, one TP "
                    "all-reduce per pass; 16, a few hundred calls/s per rank")
    ap.add_argument("--iterations", type=int, default=None,
                    help="iterations per run (default 40; 30 past 1,024 GPUs or --quick); "
                         "onsets are drawn over the middle of the run")
    ap.add_argument("--sample", default="1", metavar="K,...",
                    help="sampling factors: each scenario runs once per K on the same seed; "
                    "K=1 the full trace, K>1 the reduced version 2 trace (c4 sim --sample); in "
                    "stream mode the reduced records as the edge ships them")
    ap.add_argument("--window-ms", type=float, default=1000.0,
                    help="window of the reduced traces' progress and linkstat records")
    ap.add_argument("--mode", choices=("trace", "cli", "stream"), default="trace",
                    help="trace: the trace file through c4 analyze's reader and engine, in "
                    "process; cli: `c4 analyze` in a subprocess; stream: records fed to the "
                    "engine as a daemon receives them, advancing each trace second (online "
                    "detection latency)")
    ap.add_argument("--drop", default="", metavar="FIELD,...",
                    help="optional trace fields to leave out, as a sparser exporter would "
                    f"(trace and cli modes): {', '.join(DROPS)}")
    ap.add_argument("--as", dest="formats", default="trace", metavar="FORMAT,...",
                    help="what the scenarios are written as and read back from: trace (c4's), "
                    "nccl-inspector (NCCL Inspector files), nccl-inspector+ncclras (and "
                    "ncclras reports); several: one table each and a side-by-side")
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run in parallel")
    ap.add_argument("--json", type=Path, help="write full results here")
    ap.add_argument("--failures", type=int, default=8, help="failed scenarios listed per row")
    args = ap.parse_args(argv)
    try:
        drops = parse_drops(args.drop)
    except ValueError as exc:
        ap.error(str(exc))
    if drops and args.mode == "stream":
        ap.error("--drop rewrites the trace file: use it with --mode trace or cli")
    samples = _samples(args.sample)
    formats = tuple(dict.fromkeys(f for f in args.formats.split(",") if f))
    if not formats or any(f not in FORMATS for f in formats):
        ap.error(f"--as {args.formats}: choose from {', '.join(FORMATS)}")
    if formats != ("trace",) and (samples != (1,) or args.mode == "stream" or drops):
        ap.error("--as nccl-*: every call, trace mode, no --drop (NCCL writes what it writes)")
    if args.layers < 1:
        ap.error("--layers must be at least 1")
    if args.iterations is not None and args.iterations < 10:
        ap.error("--iterations must be at least 10 (a fault needs iterations before it)")
    logging.basicConfig(level=logging.WARNING)
    sizes = [512] if args.quick else [int(x) for x in args.gpus.split(",") if x]
    seeds = 1 if args.quick else args.seeds
    kinds = [k for k in args.kinds.split(",") if k] or None
    unknown = sorted(set(kinds or ()) - set(FAULT_KINDS))
    if unknown:
        ap.error(f"--kinds {','.join(unknown)}: choose from {', '.join(FAULT_KINDS)} (healthy "
                 "and multi runs are always included)")
    todo = scenarios(sizes, seeds, args.quick, conns=not args.no_conns, kinds=kinds,
                     fabric=args.fabric, nics_per_host=args.nics_per_host,
                     paths=not args.no_paths, shape=_shape(args.shape), layers=args.layers,
                     iterations=args.iterations,
                     topology=None if args.topology is None else str(args.topology.resolve()))
    todo = with_samples(todo, samples, args.window_ms)
    runs = [(sc, f) for f in formats for sc in todo]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="c4-accuracy-") as work:
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs) as pool:
                done = list(pool.map(run_one, [r[0] for r in runs], [args.mode] * len(runs),
                                     [work] * len(runs), [drops] * len(runs),
                                     [r[1] for r in runs]))
        else:
            done = []
            for sc, f in runs:
                done.append(run_one(sc, args.mode, work, drops, f))
                done[-1].setdefault("format", f)
                print(f"  {sc.name:<28} {done[-1]['sim_s']:5.1f}s sim "
                      f"{done[-1]['analyze_s']:6.1f}s analyze "
                      f"{len(done[-1]['reports'])} reports", file=sys.stderr)
    wall = time.perf_counter() - t0
    if formats != ("trace",):
        return _formats_report(done, formats, wall, args)
    rows_by_k = {k: summarize((d["label"], d["gpus"], _score_of(d), d["name"])
                              for d in done if d["sample"] == k) for k in samples}
    nics = f", {args.nics_per_host} NICs per host" if args.nics_per_host else ""
    fabric = args.fabric if args.topology is None else f"imported {args.topology.name}"
    if args.shape:
        nics += f", shape {args.shape} (GPH,TP,PP,MB)"
    if drops:
        nics += f", without {', '.join(drops)}"
    rates = [d["calls_per_s_per_rank"] for d in done if d.get("calls_per_s_per_rank")]
    rate = f"{statistics.median(rates):.0f}" if rates else "?"
    print(f"\naccuracy: {len(done)} runs, fabric {fabric}{nics}, mode {args.mode}, "
          f"conns {'off' if args.no_conns else 'on'}"
          f"{'' if args.no_conns or not args.no_paths else ' (no paths)'}, {wall:.0f} s")
    print(f"job: {args.layers} layer{'s' if args.layers > 1 else ''} per stage, "
          f"{todo[0].cfg.iterations if todo else '?'} iterations, {rate} calls/s "
          "per rank (measured from the generated calls, median over runs)")
    for k in samples:
        print(f"\n{_caption(k, done, args.mode)}\n")
        print_table(rows_by_k[k])
    deltas = None
    if len(samples) > 1:
        base = min(samples)
        deltas = latency_deltas((d["sample"], d["gpus"], d["label"], d["seed"], _score_of(d))
                                for d in done)
        print("\nthe same scenarios and seeds at each sampling factor:\n")
        print_comparison(rows_by_k, deltas=deltas, window_s=args.window_ms / 1e3)
        print(f"\nΔlat s: latency at K minus latency at K={base} of the same faults (found, "
              f"top-3, at both), median/worst; * where the worst exceeds one window "
              f"({args.window_ms / 1e3:g} s)"
              + (": in stream mode, when each report appeared" if args.mode == "stream" else
                 ": trace mode times the evidence (first_seen_ns), not when a daemon would "
                 "report; --mode stream for online latency"))
    print("\ndet/top3/top1≡: % of observable faults; top1: % of those not ambiguous; amb: "
          "faults named tied first with components the ground truth calls indistinguishable "
          "(counted apart, never hits); clean: runs with every fault top-1 or ambiguous and no "
          "false report; top1≡: top-1 also accepting components crossed by exactly the same "
          "connections; lat: median onset->report (s, iterations; stream mode: when the report "
          "appeared, trace and cli modes: its first_seen_ns); onset±: median first_seen_ns - "
          "true onset; false: reports explained by no fault; target: top-1 % (healthy: 0 false "
          "reports)")
    errors = [d for d in done if d["analyze_error"]]
    for d in errors[:5]:
        print(f"analyze failed on {d['name']}:\n{d['analyze_error']}")
    for k in samples:
        shown = [r for r in rows_by_k[k] if r.failures]
        if shown:
            print(f"\nmisses and false reports{f' (K={k})' if len(samples) > 1 else ''}:")
            for r in shown:
                for f in r.failures[:args.failures]:
                    print(f"  {r.gpus} {r.label}: {f}")
    if args.json:
        args.json.write_text(json.dumps({
            "mode": args.mode, "conns": not args.no_conns, "paths": not args.no_paths,
            "fabric": args.fabric,
            "topology": None if args.topology is None else str(args.topology),
            "nics_per_host": args.nics_per_host, "shape": asdict(_shape(args.shape)),
            "drops": list(drops), "layers": args.layers, "samples": list(samples),
            "window_ms": args.window_ms, "calls_per_s_per_rank": rates and
            statistics.median(rates), "wall_s": wall,
            "rows": [r.to_json() for r in rows_by_k[samples[0]]],
            "rows_by_sample": {str(k): [r.to_json() for r in rows] for k, rows in
                               rows_by_k.items()},
            "latency_delta_s_by_sample": {
                str(k): [{"gpus": g, "label": lab, "deltas": v} for (g, lab), v in cells.items()]
                for k, cells in (deltas or {}).items()},
            "scenarios": done}, indent=1) + "\n")
    return 0


def _formats_report(done: list[dict[str, Any]], formats: tuple[str, ...], wall: float,
                    args: argparse.Namespace) -> int:
    """One table per format, a side-by-side, and what each NCCL source can show."""
    by_fmt = {f: summarize((d["label"], d["gpus"], _score_of(d), d["name"])
                           for d in done if d.get("format", "trace") == f) for f in formats}
    print(f"\naccuracy: {len(done)} runs, fabric {args.fabric}, formats {', '.join(formats)}, "
          f"{wall:.0f} s")
    for f in formats:
        print(f"\n{f}\n")
        print_table(by_fmt[f])
    print("\nthe same scenarios and seeds in each format:\n")
    print_formats(by_fmt)
    print("\nwhat NCCL's sources can show, and why:\n")
    print_can_show()
    for f in formats:
        for r in by_fmt[f]:
            for x in r.failures[:args.failures]:
                print(f"  [{f}] {r.gpus} {r.label}: {x}")
    errors = [d for d in done if d["analyze_error"]]
    for d in errors[:5]:
        print(f"analyze failed on {d['name']} ({d.get('format')}):\n{d['analyze_error']}")
    if args.json:
        args.json.write_text(json.dumps({
            "formats": list(formats), "wall_s": wall,
            "rows_by_format": {f: [r.to_json() for r in rows] for f, rows in by_fmt.items()},
            "scenarios": done}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
