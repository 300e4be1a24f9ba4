"""Traffic plans in the lab: policy routes that pin a source-destination pair to one spine, and
a bench that measures a cross-leaf collective's bandwidth under ECMP and under the planner's
placement on the same fabric."""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from c4 import lab_state as state
from c4.lab import system
from c4.lab.layout import PLAN_RULE_PRIORITY, PLAN_TABLE_BASE, Layout
from c4.lab.system import LabError

log = logging.getLogger(__name__)

BENCH_SCRIPT = Path(__file__).with_name("bench_collective.py")


@dataclass(frozen=True)
class Pin:
    """Traffic from host ``src`` to host ``dst`` leaves the source leaf through ``spine``."""

    src: str
    dst: str
    spine: str


def pins_from_plan(lay: Layout, plan: dict[str, Any]) -> list[Pin]:
    """Pins from a plan object (shared specs section 4): the spine on each cross-leaf path.
    Flows within one leaf need no pin; several flows of one host pair must agree (routes are
    per address pair)."""
    topo = lay.topology
    pins: dict[tuple[str, str], str] = {}
    for item in plan["plan"]:
        spines = [n for n in item["path"] if n in lay.spines]
        if not spines:
            continue
        key = (topo.host_of(item["src"]), topo.host_of(item["dst"]))
        if pins.setdefault(key, spines[0]) != spines[0]:
            log.warning("flows %s>%s take spines %s and %s; routes pin pairs, using %s",
                        *key, pins[key], spines[0], pins[key])
    return [Pin(s, d, sp) for (s, d), sp in sorted(pins.items())]


def apply_pins(lab_dir: Path, pins: list[Pin]) -> None:
    """Replace the lab's policy routes with ``pins`` (``ip rule from A to B lookup T`` in the
    source's leaf, T routing everything through one spine)."""
    from c4.lab.lab import layout_of, require

    system.require_root()
    with state.locked(lab_dir):
        st = require(lab_dir)
        lay = layout_of(st)
        _flush(lay)
        rules: dict[str, list[str]] = {}
        for p in pins:
            if p.spine not in lay.spines:
                raise LabError(f"{p.spine!r} is not a spine of this lab")
            leaf = lay.leaf_of[p.src]
            table = PLAN_TABLE_BASE + lay.spines.index(p.spine)
            rules.setdefault(lay.ns(leaf), []).append(
                f"rule add from {lay.host_addr[p.src]} to {lay.host_addr[p.dst]} "
                f"lookup {table} priority {PLAN_RULE_PRIORITY}")
        for ns, lines in rules.items():
            system.ip_batch(lines, ns)
        st["plan"] = [asdict(p) for p in pins]
        state.write(lab_dir, st)


def clear_pins(lab_dir: Path) -> None:
    from c4.lab.lab import layout_of, require

    with state.locked(lab_dir):
        st = require(lab_dir)
        _flush(layout_of(st))
        st["plan"] = []
        state.write(lab_dir, st)


def _flush(lay: Layout) -> None:
    for leaf in lay.leaves:
        ns = lay.ns(leaf)
        out = system.run(["ip", "-n", ns, "-j", "rule", "show"]).stdout
        n = sum(1 for r in json.loads(out or "[]") if r.get("priority") == PLAN_RULE_PRIORITY)
        system.ip_batch([f"rule del priority {PLAN_RULE_PRIORITY}"] * n, ns)


def dead_links(st: dict[str, Any]) -> list[str]:
    """Link ids that active dead-link faults have taken down (a switch target: all its links)."""
    out: list[str] = []
    for rec in st.get("faults", []):
        if rec["kind"] == "dead-link" and rec["cleared_at"] is None:
            out += rec["undo"]["links"]
    return sorted(set(out))


def plan_and_pin(lab_dir: Path, flows: list[Any]) -> tuple[list[Pin], dict[str, Any]]:
    """Plan ``flows`` (traffic_planner Flows between lab NICs) around the lab's dead links with
    the traffic planner, and pin them; returns the pins and the plan object (section 4)."""
    from c4.lab.lab import layout_of, require
    from traffic_planner.plan import plan_flows

    st = require(lab_dir)
    lay = layout_of(st)
    plan = plan_flows(lay.topology, flows, dead_links(st), roce=False, ecmp_seeds=0,
                      with_bound=False).to_json()
    pins = pins_from_plan(lay, plan)
    apply_pins(lab_dir, pins)
    return pins, plan


# ----- the bench ------------------------------------------------------------------------------
@dataclass
class BenchResult:
    """Per-flow bandwidth (Gbit/s) of the cross-leaf transfer, one value per trial (a trial is
    a fresh process group: new connections, new source ports, a new ECMP draw)."""

    ecmp_gbps: list[float]
    planned_gbps: list[float]
    pins: list[Pin]
    plan: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        def row(name: str, v: list[float]) -> str:
            return (f"{name:<8} {statistics.median(v):>8.3f} {min(v):>8.3f} {max(v):>8.3f} "
                    f"{len(v):>6}")

        return "\n".join([f"{'routing':<8} {'median':>8} {'min':>8} {'max':>8} {'trials':>6}"
                          "   (Gbit/s per flow, cross-leaf transfer)",
                          row("ecmp", self.ecmp_gbps), row("planned", self.planned_gbps),
                          "pins: " + ", ".join(f"{p.src}>{p.dst} via {p.spine}"
                                               for p in self.pins)])


def bench_flows(lay: Layout) -> list[tuple[str, str]]:
    """Host pairs of the transfer: host i of the first half sends to host i of the second half
    (with two hosts per leaf on four hosts: leaf00's hosts to leaf01's, over the uplinks)."""
    half = len(lay.hosts) // 2
    return [(lay.hosts[i], lay.hosts[i + half]) for i in range(half)]


def plan_bench(lab_dir: Path, *, trials: int = 4, megabytes: int = 16, iters: int = 3,
               timeout: float = 300) -> BenchResult:
    """Run the cross-leaf transfer (1 rank per host) with ECMP, then plan its flows with the
    traffic planner (around links that dead-link faults took down), pin them, and run it
    again; the pins are removed afterwards."""
    from c4.lab.lab import layout_of, require, start_job, wait_job
    from traffic_planner.flows import Flow

    st = require(lab_dir)
    lay = layout_of(st)
    if len(lay.hosts) < 2 or len(lay.leaves) < 2:
        raise LabError("the bench needs hosts under at least two leaves")
    gbps = st["spec"]["host_mbit"] / 1000
    flows = [Flow(f"x:{a}>{b}", f"{a}/nic0", f"{b}/nic0", gbps) for a, b in bench_flows(lay)]
    env = {"C4_BENCH_TRIALS": str(trials), "C4_BENCH_MB": str(megabytes),
           "C4_BENCH_ITERS": str(iters)}
    results: dict[str, list[float]] = {}
    pins: list[Pin] = []
    plan: dict[str, Any] = {}
    try:
        for mode in ("ecmp", "planned"):
            if mode == "planned":
                pins, plan = plan_and_pin(lab_dir, flows)
            out = lab_dir / f"bench-{mode}.json"
            out.unlink(missing_ok=True)
            job, services = start_job(lab_dir, BENCH_SCRIPT, [str(out)], nproc=1,
                                      job=f"plan-bench-{mode}", env=env)
            code = wait_job(services, timeout)
            if code or not out.exists():
                raise LabError(f"bench job {job} failed ({code}):\n"
                               f"{services[0].output()[-1500:]}")
            results[mode] = json.loads(out.read_text())["gbps_per_flow"]
    finally:
        clear_pins(lab_dir)
    return BenchResult(results["ecmp"], results["planned"], pins, plan)
