"""The accuracy bench's printed tables: one row per fault kind and size, grouped by sampling
factor, and a side-by-side of the factors on the same seeds."""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np

from bench.accuracy.score import Row

TARGETS = {  # top-1 targets from the issue (with conn records)
    "rank_hang": 99.0, "slow_gpu": 99.0, "slow_host": 99.0, "comm_hang": 99.0, "error": 99.0,
    "slow_nic": 95.0, "dead_nic": 95.0, "slow_link": 95.0, "dead_link": 95.0,
    "slow_switch": 95.0, "dead_switch": 95.0, "multi": 95.0,
}


def _pct(v: float | None) -> str:
    return "   -" if v is None else f"{v:5.1f}"


def print_table(rows: list[Row], out: TextIO | None = None) -> None:
    out = out or sys.stdout     # the current one (a caller may have redirected it)
    head = (f"{'gpus':>5} {'fault':<12} {'runs':>4} {'det%':>6} {'top1%':>6} {'top3%':>6} "
            f"{'top1≡%':>6} {'amb':>3} "
            f"{'clean%':>6} {'target':>6} {'lat s':>7} {'lat it':>6} {'onset±s':>7} {'false':>5} "
            f"{'false/1k it':>11}")
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        j = r.to_json()
        lat = "-" if j["latency_s_median"] is None else f"{j['latency_s_median']:.1f}"
        lit = "-" if j["latency_iters_median"] is None else f"{j['latency_iters_median']:.0f}"
        err = "-" if j["onset_error_s_median"] is None else f"{j['onset_error_s_median']:+.1f}"
        tgt = f"{TARGETS[r.label]:.0f}" if r.label in TARGETS else "0 fr"
        unobs = f" ({r.unobservable} unobservable)" if r.unobservable else ""
        print(f"{r.gpus:>5} {r.label:<12} {r.scenarios:>4} {_pct(j['detected_pct']):>6} "
              f"{_pct(j['top1_pct']):>6} {_pct(j['top3_pct']):>6} "
              f"{_pct(j['top1_equiv_pct']):>6} {r.ambiguous:>3} "
              f"{_pct(j['clean_pct']):>6} "
              f"{tgt:>6} {lat:>7} {lit:>6} {err:>7} {r.false_reports:>5} "
              f"{r.false_per_1000_iters:>11.2f}{unobs}", file=out)


#: latencies are differences of float seconds: a difference of exactly one window may come
#: out a hair above it
_SLACK_S = 1e-3


def _delta(v: list[float] | None, window_s: float | None) -> str:
    """Median and worst of paired latency differences, ``*`` when the worst exceeds a window."""
    if not v:
        return "-"
    worst = max(v)
    flag = "*" if window_s is not None and worst > window_s + _SLACK_S else ""
    return f"{float(np.median(v)):+.1f}/{worst:+.1f}{flag}"


def print_comparison(rows_by_k: dict[int, list[Row]], out: TextIO | None = None,
                     deltas: dict[int, dict[tuple[int, str], list[float]]] | None = None,
                     window_s: float | None = None) -> None:
    """Per fault kind and size, detection, top-1, false reports and median latency at each
    sampling factor, the same scenarios and seeds in every column; with ``deltas``
    (``score.latency_deltas``), for each factor after the first the latency difference to the
    first on the same faults, median/worst, starred where the worst exceeds ``window_s``."""
    out = out or sys.stdout
    ks = sorted(rows_by_k)
    cells = {k: {(r.gpus, r.label): r for r in rows} for k, rows in rows_by_k.items()}
    keys = list(dict.fromkeys((r.gpus, r.label) for k in ks for r in rows_by_k[k]))
    delta_of = {k: (deltas or {}).get(k, {}) for k in ks[1:]} if deltas is not None else {}
    width = {k: 26 + (13 if k in delta_of else 0) for k in ks}
    head = f"{'gpus':>5} {'fault':<12}" + "".join(f" {'K=' + str(k):>{width[k] - 1}}"
                                                   for k in ks)
    sub = f"{'':>5} {'':<12}" + "".join(
        f" {'det%':>6} {'top1%':>6} {'false':>5} {'lat s':>6}"
        + (f" {'Δlat s':>12}" if k in delta_of else "") for k in ks)
    print(head, file=out)
    print(sub, file=out)
    print("-" * len(sub), file=out)
    for key in keys:
        line = f"{key[0]:>5} {key[1]:<12}"
        for k in ks:
            r = cells[k].get(key)
            if r is None:
                line += f" {'':>{width[k] - 1}}"
                continue
            j = r.to_json()
            lat = "-" if j["latency_s_median"] is None else f"{j['latency_s_median']:.1f}"
            line += (f" {_pct(j['detected_pct']):>6} {_pct(j['top1_pct']):>6} "
                     f"{r.false_reports:>5} {lat:>6}")
            if k in delta_of:
                line += f" {_delta(delta_of[k].get(key), window_s):>12}"
        print(line, file=out)
