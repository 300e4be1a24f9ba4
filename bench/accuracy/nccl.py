"""The accuracy bench on NCCL's own telemetry (``--as nccl-inspector`` and
``--as nccl-inspector+ncclras``): each scenario is simulated once, written as NCCL would have
written it (``c4 sim --as``: the Inspector's files, one per process, and optionally the
``ncclras -f json`` reports a poller would have taken), read back through the NCCL readers and
``c4 analyze``'s engine, and scored against the same ground truth as c4's own trace.

What each source can show is a property of its fields, not of the detectors; the table
:data:`CAN_SHOW` states it per fault kind, with the reason, and the bench prints it beside the
measured rows.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from bench.accuracy.scenarios import Scenario
from bench.accuracy.score import Row, score_scenario

FORMATS = ("trace", "nccl-inspector", "nccl-inspector+ncclras")

#: per fault kind and format: (can show, why). "trace" is c4's own (with conn records).
CAN_SHOW: dict[str, dict[str, tuple[str, str]]] = {
    "slow_gpu": {
        "nccl-inspector": ("yes", "each call's kernel start (the GPU's arrival) and end: a late "
                           "rank and its compute time, on the GPU's clock"),
        "ncclras": ("no", "launch counts only, no times")},
    "slow_host": {
        "nccl-inspector": ("yes", "as slow_gpu, for every rank of the host"),
        "ncclras": ("no", "launch counts only, no times")},
    "slow_nic": {
        "nccl-inspector": ("partly", "calls slow down but no per-connection time: localized "
                           "only as far as the communicators' structure allows"),
        "ncclras": ("no", "no times")},
    "slow_link": {
        "nccl-inspector": ("partly", "as slow_nic"), "ncclras": ("no", "no times")},
    "slow_switch": {
        "nccl-inspector": ("partly", "as slow_nic"), "ncclras": ("no", "no times")},
    "dead_nic": {
        "nccl-inspector": ("no", "only completed calls are written: a stuck call is silence"),
        "ncclras": ("partly", "every member launched the stuck call: a comm_hang, localized "
                    "only by structure (no connection data)")},
    "dead_link": {
        "nccl-inspector": ("no", "as dead_nic"),
        "ncclras": ("partly", "a cable as dead_nic (its one path is named); an uplink, one of "
                    "several ECMP routes between two leaves, cannot be told from the others' "
                    "links and spines: the hang is reported naming no component")},
    "dead_switch": {
        "nccl-inspector": ("no", "as dead_nic"),
        "ncclras": ("partly", "a leaf as dead_nic (on the stuck pair's one path); a spine, "
                    "like an uplink, lies on one of several ECMP routes: the hang is reported "
                    "naming no component")},
    "comm_hang": {
        "nccl-inspector": ("no", "as dead_nic"),
        "ncclras": ("partly", "every member launched the stuck call, and without connection "
                    "data every member's NIC and path (and transport) explain it equally: "
                    "the hang is reported naming no component")},
    "rank_hang": {
        "nccl-inspector": ("no", "the hung rank and its peers all stop writing"),
        "ncclras": ("yes", "launch counts: the hung process launched nothing past what it "
                    "completed, while its peers' CPUs ran ahead of their stuck streams (past "
                    "a send or receive too, which RAS does not count); a hung GPU kernel, "
                    "whose CPU runs on, is not told from a stuck transfer")},
    "error": {
        "nccl-inspector": ("no", "a failed call is never written; the process exits"),
        "ncclras": ("yes", "the process is missing from RAS (unresponsive, then dead)")},
}


def analyze_nccl_run(out: Path, topology: Path, with_ras: bool) -> list[dict[str, Any]]:
    """Reports for a simulated run written as NCCL's telemetry, in this process."""
    from c4.report import reports_to_json
    from c4.topology import Topology
    from diagnosis.nccl.analyze import analyze_nccl
    from diagnosis.nccl.sources import read_sources
    from diagnosis.sim.formats import INSPECTOR_DIR, RAS_FILE

    sources = read_sources([out / INSPECTOR_DIR], [out / RAS_FILE] if with_ras else [])
    reports, _ = analyze_nccl(sources, Topology.load(topology))
    return reports_to_json(reports)["reports"]


def run_nccl(sc: Scenario, fmt: str, workdir: str) -> dict[str, Any]:
    """One scenario in format ``fmt`` (not ``trace``), as ``run.run_one`` reports it."""
    from diagnosis.sim.formats import sinks_for
    from diagnosis.sim.run import simulate

    t0 = time.perf_counter()
    out = Path(workdir) / f"{sc.name}-{fmt}"
    with_ras = fmt.endswith("+ncclras")
    res = simulate(sc.cfg, out, sinks=sinks_for(["nccl-inspector"] + (["ncclras"] if with_ras
                                                                       else [])), trace=False)
    truth = json.loads(res.truth.read_text())
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    t_sim = time.perf_counter() - t0
    try:
        reports = analyze_nccl_run(out, res.topology, with_ras)
    except Exception:   # a crash is a result too
        reports = []
        truth["analyze_error"] = traceback.format_exc()[-3000:]
    t_an = time.perf_counter() - t0 - t_sim
    shutil.rmtree(out, ignore_errors=True)
    score = score_scenario(truth, reports)
    from dataclasses import asdict

    return {"name": sc.name, "label": sc.label, "gpus": sc.gpus, "seed": sc.cfg.seed,
            "sample": 1, "format": fmt, "faults": truth["faults"],
            "iterations": truth["iterations"], "records": truth["records"],
            "trace_bytes": size, "calls_per_s_per_rank": truth.get("calls_per_s_per_rank"),
            "score": asdict(score),
            "reports": [{k: r.get(k) for k in ("kind", "suspects", "first_seen_ns",
                                                  "summary")} for r in reports],
            "analyze_error": truth.get("analyze_error"), "sim_s": t_sim, "analyze_s": t_an}


def print_formats(rows_by_fmt: dict[str, list[Row]], out: TextIO | None = None) -> None:
    """Per fault kind and size: detection, top-1 and false reports in each format, and what
    the NCCL sources can show of that kind."""
    out = out or sys.stdout
    fmts = [f for f in FORMATS if f in rows_by_fmt]
    cells = {f: {(r.gpus, r.label): r for r in rows} for f, rows in rows_by_fmt.items()}
    keys = list(dict.fromkeys((r.gpus, r.label) for f in fmts for r in rows_by_fmt[f]))
    head = f"{'gpus':>5} {'fault':<12}" + "".join(f" {f:>22}" for f in fmts) + \
        "  inspector / +ras can show"
    sub = f"{'':>5} {'':<12}" + "".join(f" {'det%':>6} {'top1%':>6} {'false':>8}"
                                        for _ in fmts)
    print(head, file=out)
    print(sub, file=out)
    print("-" * len(head), file=out)
    for key in keys:
        line = f"{key[0]:>5} {key[1]:<12}"
        for f in fmts:
            r = cells[f].get(key)
            if r is None:
                line += f" {'':>22}"
                continue
            j = r.to_json()
            det = "-" if j["detected_pct"] is None else f"{j['detected_pct']:.0f}"
            top = "-" if j["top1_pct"] is None else f"{j['top1_pct']:.0f}"
            line += f" {det:>6} {top:>6} {r.false_reports:>8}"
        show = CAN_SHOW.get(key[1])
        if show:
            line += f"  {show['nccl-inspector'][0]} / {show['ncclras'][0]}"
        print(line, file=out)


def print_can_show(out: TextIO | None = None) -> None:
    """The table of what each NCCL source can and cannot show, and why."""
    out = out or sys.stdout
    print(f"{'fault':<12} {'Inspector':<8} {'why':<70} {'+ RAS':<7} why", file=out)
    for kind, d in CAN_SHOW.items():
        a, b = d["nccl-inspector"], d["ncclras"]
        print(f"{kind:<12} {a[0]:<8} {a[1]:<70} {b[0]:<7} {b[1]}", file=out)
