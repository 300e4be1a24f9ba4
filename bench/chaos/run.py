"""Chaos benchmark of the node's sidecar and the daemon: faults against real processes, exact
counts.

    python -m bench.chaos.run [--only NAME ...] [--rate 5000] [--cost-rate 40000]
                              [--cost-seconds 25] [--cost-runs 2] [--no-cost] [--daemon-only]

Each scenario runs 8 simulated ranks (the real collector shipper, in their own process) at
``--rate`` records/s through one ``c4 sidecar`` into one ``c4 daemon`` (SQLite store), injects
its fault, waits until everything still held is delivered, then counts: records sent (rows the
ranks recorded), stored (unique (rank, seq) in the store), lost (sent - stored), lost
uncounted (lost - drops counted by the collectors and the sidecars), duplicated (rows the
daemon stored as new beyond the unique ones), and the peak resident size of the sidecar (over
its restarts) and of the daemon. Scenarios:

- baseline: no fault;
- sigkill: the sidecar SIGKILLed mid-stream and restarted a second later on the same log;
- frozen-sigkill: the daemon frozen (SIGSTOP) for 20 s, the sidecar SIGKILLed at its end;
- disk-full: the daemon unreachable for 40 s (a relay in front of it is cut, so that its
  counters stay exact) with the spill directory on a 6 MB tmpfs (needs root);
- disk-stays-full: the same on a 1 MB tmpfs, which the outage overflows;
- forged-stats: a local peer sends statistics claiming 4M collectors;
- flood: local peers hold unfinished frames (300 x 1 MiB of a 15 MiB frame, 100 announcing
  1 GiB, a new wave every 5 s for 15 s).

Then the daemon-side attacks (``daemon_side.py``), each sent straight to a real ``c4 daemon``
(SQLite store) next to job B, whose planted hang (rank 1 never enters a call rank 0 waits in)
is timed from its last request to its fault report (target: 5 s):

- hang-alone: no attack, the reference;
- poison: a batch of job A with int64-extreme times, and one stamped 1970;
- huge-group: a GroupInfo of 1,048,575 ranks (5 MB);
- million-names: an op batch whose string table holds 1,000,000 names;
- watches: 520 ``c4 faults watch`` streams held open;
- random-bytes: 200 requests of random bytes to ``Ingest/Send``;
- max-jobs: with ``--max-jobs 2`` and one job live, a real sidecar outbox carries job C (one
  too many) ahead of job A's 50,000 records: C is parked, A flows.

Then the write-ahead log's cost, two ways: the sidecar process's CPU seconds per million
records at ``--cost-rate`` records/s, with and without the log (``--no-wal``; memory store in
the daemon), alternating, ``--cost-runs`` times each (on a busy machine these vary by +-10%
from run to run); and the sidecar's own path for op frames (decode, log, batch, cut, release)
on one thread, with and without the log, in alternating blocks (``walcost.py``), which isolates
what the log adds per record.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.chaos import walcost
from bench.chaos.daemon_side import DAEMON_SCENARIOS, DaemonRow
from bench.chaos.scenarios import SCENARIOS, Cost, Row, wal_cost


def _table(rows: list[Row], rate: float) -> Table:
    table = Table(title=f"chaos: 8 ranks at {rate:,.0f} records/s through one sidecar")
    for col in ("scenario", "sent", "stored", "lost", "lost uncounted", "duplicated",
                "drops counted", "sidecar peak MiB", "daemon peak MiB"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for r in rows:
        table.add_row(r.scenario, f"{r.sent:,}", f"{r.stored:,}", f"{r.lost:,}",
                      f"{r.uncounted:,}", f"{r.duplicated:,}",
                      f"{r.counted:,}" + (f" ({r.collector_drops:,} by collectors)"
                                          if r.collector_drops else ""),
                      f"{r.sidecar_mib:,.0f}", f"{r.daemon_mib:,.0f}")
    return table


def _daemon_table(rows: list[DaemonRow]) -> Table:
    table = Table(title="daemon-side attacks, each next to job B's planted hang")
    for col in ("attack", "the attack got", "B's hang reported after", "c4 status took",
                "daemon peak MiB", "notes"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.scenario, r.answer,
                      "never" if r.report_s is None else f"{r.report_s:.1f} s",
                      f"{r.status_ms:,.0f} ms", f"{r.daemon_mib:,.0f}", "; ".join(r.notes))
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=sorted({*SCENARIOS, *DAEMON_SCENARIOS}),
                    help="run only this scenario (repeatable)")
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--cost-rate", type=float, default=40000.0)
    ap.add_argument("--cost-seconds", type=float, default=25.0)
    ap.add_argument("--cost-runs", type=int, default=3)
    ap.add_argument("--no-cost", action="store_true", help="skip the WAL cost measurement")
    ap.add_argument("--cost-only", action="store_true", help="only the WAL cost measurement")
    ap.add_argument("--daemon-only", action="store_true",
                    help="only the daemon-side attacks (no sidecar scenarios, no WAL cost)")
    args = ap.parse_args(argv)
    console = Console(width=max(160, Console().width))
    chosen = args.only or [*([] if args.daemon_only else SCENARIOS), *DAEMON_SCENARIOS]
    names = [] if args.cost_only else [n for n in chosen if n in SCENARIOS]
    daemon_names = [] if args.cost_only else [n for n in chosen if n in DAEMON_SCENARIOS]
    if os.geteuid() != 0:
        for name in ("disk-full", "disk-stays-full"):
            if name in names:
                console.print(f"{name} mounts a tmpfs and needs root: skipped")
                names.remove(name)
    rows: list[Row] = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"c4-chaos-{name}-") as d:
            row = SCENARIOS[name](Path(d), args.rate)
        rows.append(row)
        console.print(f"{row.scenario}: sent {row.sent:,}, stored {row.stored:,}, lost "
                      f"{row.lost:,} ({row.uncounted:,} uncounted), duplicated "
                      f"{row.duplicated:,}; " + "; ".join(row.notes))
    if rows:
        console.print(_table(rows, args.rate))
    daemon_rows: list[DaemonRow] = []
    for name in daemon_names:
        with tempfile.TemporaryDirectory(prefix=f"c4-chaos-{name}-") as d:
            drow = DAEMON_SCENARIOS[name](Path(d))
        daemon_rows.append(drow)
        console.print(f"{drow.scenario}: {drow.answer}; hang reported after "
                      f"{drow.report_s}; " + "; ".join(drow.notes))
    if daemon_rows:
        console.print(_daemon_table(daemon_rows))
    if args.no_cost or args.daemon_only:
        return
    costs: list[Cost] = []
    for _ in range(args.cost_runs):
        for wal in (True, False):
            with tempfile.TemporaryDirectory(prefix="c4-chaos-cost-") as d:
                cost = wal_cost(Path(d), args.cost_rate, args.cost_seconds, wal)
            costs.append(cost)
            console.print(f"{cost.mode}: {cost.records:,} records, {cost.cpu_s:.2f} CPU s, "
                          f"{cost.per_million:.2f} CPU s per million records")
    paths = walcost.measure()
    console.print(_cost_table(costs, paths, args.cost_rate))


def _cost_table(costs: list[Cost], paths: list[walcost.PathCost], rate: float) -> Table:
    table = Table(title="sidecar CPU seconds per million records, with and without its log")
    for col in ("measured", "with the log", "without (--no-wal)", "the log adds"):
        table.add_column(col)
    e2e = {wal: statistics.median(c.per_million for c in costs if c.wal == wal)
           for wal in (True, False)}
    runs = {wal: ", ".join(f"{c.per_million:.2f}" for c in costs if c.wal == wal)
            for wal in (True, False)}
    table.add_row(f"sidecar process, {rate:,.0f} records/s end to end (runs; median)",
                  f"{runs[True]}; {e2e[True]:.2f}", f"{runs[False]}; {e2e[False]:.2f}",
                  f"{100 * (e2e[True] - e2e[False]) / e2e[False]:+.1f}%")
    one = {wal: statistics.median(p.per_million for p in paths if p.wal == wal)
           for wal in (True, False)}
    added = one[True] - one[False]
    table.add_row("its op-frame path on one thread (median of blocks)", f"{one[True]:.3f}",
                  f"{one[False]:.3f}", f"{added:+.3f} = {100 * added / e2e[False]:.1f}% of the "
                  "sidecar's CPU per record without the log")
    return table

if __name__ == "__main__":
    main()
