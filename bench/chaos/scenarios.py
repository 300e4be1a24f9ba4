"""The chaos scenarios: each runs simulated ranks through one sidecar into one daemon (SQLite
store), injects its fault on a schedule, waits until everything the system still holds is
delivered, and counts exactly: every record is a unique (rank, seq)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos.attack import Attacker
from bench.chaos.cluster import Cluster, cpu_seconds
from bench.chaos.ranks import Load, LoadPlan
from c4.processes import wait_for
from tests.support.mounts import tmpfs

RANKS = 8


@dataclass
class Row:
    scenario: str
    sent: int
    stored: int             # unique (rank, seq) in the store
    ingested: int           # op rows the daemon stored as new: above ``stored`` = duplicates
    collector_drops: int    # counted by the collectors
    sidecar_drops: int      # counted by the sidecar(s)
    sidecar_mib: float      # peak resident size
    daemon_mib: float
    notes: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.sent - self.stored

    @property
    def duplicated(self) -> int:
        return self.ingested - self.stored

    @property
    def counted(self) -> int:
        return self.collector_drops + self.sidecar_drops

    @property
    def uncounted(self) -> int:
        return self.lost - self.counted


Event = tuple[float, Callable[[], None]]


def _run(name: str, cluster: Cluster, workdir: Path, *, rate: float, duration: float,
         events: list[Event], settle_s: float = 180.0) -> Row:
    job = name
    load = Load(LoadPlan(str(cluster.sock), job, RANKS, rate, duration), workdir).start()
    t0 = time.monotonic()
    load.go()
    for at, action in sorted(events, key=lambda e: e[0]):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        action()
    result = load.result(duration + settle_s + 60)
    notes = []
    if any(result.unacked):
        notes.append(f"{sum(result.unacked)} frames never acknowledged")
    try:
        wait_for(cluster.drained, settle_s, interval=0.5, what="the sidecar to drain")
    except TimeoutError as exc:
        notes.append(str(exc))
    with cluster.client() as client:
        def settled() -> tuple[int, int]:
            cols = client.ops(job)
            unique = len(set(zip(cols["rank"].tolist(), cols["seq"].tolist())))
            return unique, client.status().records_ingested
        # the daemon may still be committing what the sidecar was told is stored: read until
        # two readings a second apart agree
        last, now = None, settled()
        deadline = time.monotonic() + 30
        while now != last and time.monotonic() < deadline:
            time.sleep(1.0)
            last, now = now, settled()
        stored, ingested = now
    if sum(result.resent):
        notes.append(f"{sum(result.resent)} frames resent by the collectors")
    return Row(name, sum(result.sent), stored, ingested, sum(result.dropped),
               cluster.sidecar_drops(), cluster.peak_mib["sidecar"], cluster.peak_mib["daemon"],
               notes)


@contextlib.contextmanager
def _cluster(workdir: Path, **kwargs) -> Iterator[Cluster]:
    cluster = Cluster(workdir, **kwargs)
    try:
        cluster.start_sidecar()
        yield cluster
    finally:
        cluster.close()


def baseline(workdir: Path, rate: float) -> Row:
    with _cluster(workdir) as c:
        return _run("baseline", c, workdir, rate=rate, duration=15, events=[])


def sidecar_sigkill(workdir: Path, rate: float) -> Row:
    with _cluster(workdir) as c:
        return _run("sidecar SIGKILL mid-stream", c, workdir, rate=rate, duration=20,
                    events=[(8.0, c.kill_sidecar), (9.0, c.start_sidecar)])


def frozen_daemon_then_sidecar_sigkill(workdir: Path, rate: float) -> Row:
    with _cluster(workdir) as c:
        def restart() -> None:
            c.start_sidecar()
            c.thaw_daemon()
        return _run("daemon frozen 20 s, then sidecar SIGKILL", c, workdir, rate=rate,
                    duration=30, events=[(4.0, c.freeze_daemon), (24.0, c.kill_sidecar),
                                         (25.0, restart)])


def daemon_down_full_disk(workdir: Path, rate: float, size: str = "6m") -> Row:
    with tmpfs(workdir / "spill", size) as spill, _cluster(workdir, spill_dir=spill) as c:
        row = _run(f"daemon down 40 s, {size.rstrip('m')} MB tmpfs spill", c, workdir, rate=rate,
                   duration=50, events=[(5.0, c.relay.cut), (45.0, c.relay.restore)])
        row.notes.append("the disk filled: drops are counted (disk_full)"
                         if row.sidecar_drops else "the disk never filled (frames are "
                         "compressed while the daemon is away)")
        return row


def forged_stats(workdir: Path, rate: float, entries: int = 4_000_000) -> Row:
    with _cluster(workdir) as c:
        attacker = Attacker.forged_stats(c.sock, entries, 1_300_000, workdir)
        row = _run(f"forged stats ({entries / 1e6:g}M entries)", c, workdir, rate=rate,
                   duration=20, events=[(3.0, attacker.start)])
        got = attacker.result(60)
        refused = c.metric("c4_sidecar_refused_frames_total")
        row.notes.append(f"{got.get('entries', 0):,} forged entries sent, {refused:.0f} "
                         "frames refused")
        return row


def partial_frame_flood(workdir: Path, rate: float) -> Row:
    with _cluster(workdir) as c:
        attacker = Attacker.flood(c.sock, 15.0, workdir)
        row = _run("partial-frame flood", c, workdir, rate=rate, duration=20,
                   events=[(3.0, attacker.start)])
        got = attacker.result(60)
        closed = c.metric("c4_sidecar_closed_connections_total")
        row.notes.append(f"{got.get('opened', 0)} hostile connections, {closed:.0f} closed by "
                         "the sidecar")
        return row


SCENARIOS: dict[str, Callable[[Path, float], Row]] = {
    "baseline": baseline,
    "sigkill": sidecar_sigkill,
    "frozen-sigkill": frozen_daemon_then_sidecar_sigkill,
    "disk-full": daemon_down_full_disk,
    "disk-stays-full": lambda workdir, rate: daemon_down_full_disk(workdir, rate, "1m"),
    "forged-stats": forged_stats,
    "flood": partial_frame_flood,
}


@dataclass
class Cost:
    wal: bool
    records: int
    cpu_s: float

    @property
    def mode(self) -> str:
        return "with the log" if self.wal else "without (--no-wal)"

    @property
    def per_million(self) -> float:
        return self.cpu_s / self.records * 1e6


def wal_cost(workdir: Path, rate: float, duration: float, wal: bool) -> Cost:
    """CPU seconds the sidecar spends on ``rate`` records/s for ``duration`` s, from the first
    record to the last acknowledgement, with or without its write-ahead log."""
    args = () if wal else ("--no-wal",)
    with _cluster(workdir, store="memory", sidecar_args=args) as c:
        load = Load(LoadPlan(str(c.sock), "cost", RANKS, rate, duration), workdir).start()
        cpu0 = cpu_seconds(c.sidecar_pid)
        load.go()
        result = load.result(duration + 240)
        wait_for(c.drained, 120, interval=0.2, what="the sidecar to drain")
        cpu = cpu_seconds(c.sidecar_pid) - cpu0
        return Cost(wal, sum(result.sent), cpu)
