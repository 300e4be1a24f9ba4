"""Health series for a simulated job (``c4 sim --health ...``): what each GPU, NIC port and
host would report every ``interval`` of the run, healthy with small noise, plus planted causes
(the health side of an injected timing fault) and decoys (a cause on a component with no
timing fault, which must never be named as the cause of a report).

The series is appended to the trace as ``health`` records and described in truth.json under
``health``. Causes and the timing fault they stand behind:

=================  =========  ====================================================  ==========
cause              on         what the node reports from onset                      fault
=================  =========  ====================================================  ==========
``thermal``        GPU        HW thermal slowdown active, 91 °C, SM clock / slow     slow_gpu
``pcie_downtrain`` GPU        PCIe link x8 of x16                                    slow_gpu
``ecc_storm``      GPU        corrected DRAM ECC errors climbing 20/s                slow_gpu
``cpu_contention`` host       PSI cpu some avg10 ≈ 60%                               slow_host
``noisy_ib_port``  NIC        symbol errors +5/s, receive errors +1/s                slow_nic
=================  =========  ====================================================  ==========
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from c4.proto.health import HealthRecord
from diagnosis.sim.config import SimError

S = 1_000_000_000

#: cause -> (component kind it sits on, the sim fault it stands behind, the finding it makes)
CAUSES: dict[str, tuple[str, str, str]] = {
    "thermal": ("gpu", "slow_gpu", "thermal_slowdown"),
    "pcie_downtrain": ("gpu", "slow_gpu", "pcie_downtrain"),
    "ecc_storm": ("gpu", "slow_gpu", "ecc_storm"),
    "cpu_contention": ("host", "slow_host", "cpu_pressure"),
    "noisy_ib_port": ("nic", "slow_nic", "ib_errors"),
}


@dataclass(frozen=True)
class Planted:
    cause: str
    target: str
    onset_ns: int
    decoy: bool

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "target": self.target, "onset_ns": self.onset_ns,
                "decoy": self.decoy, "finding": CAUSES[self.cause][2]}


def _placement(trace: Path) -> tuple[list[str], list[str], list[str]]:
    """The job's hosts, GPUs and NICs from the rank records at the head of the trace."""
    hosts: dict[str, None] = {}
    gpus: dict[str, None] = {}
    nics: dict[str, None] = {}
    with open(trace, "rb") as fh:
        for line in fh:
            rec = orjson.loads(line)
            t = rec.get("type")
            if t == "rank":
                hosts[rec["host"]] = None
                if rec.get("gpu"):
                    gpus[rec["gpu"]] = None
                if rec.get("nic"):
                    nics[rec["nic"]] = None
            elif t not in ("meta", "group"):
                break
    return list(hosts), list(gpus), list(nics)


def add_health(out_dir: str | Path, *, cause: str | None = None, decoys: int = 0,
               decoy_causes: tuple[str, ...] = tuple(CAUSES), interval_s: float = 1.0,
               seed: int = 0) -> list[Planted]:
    """Append the health series to ``out_dir``'s trace and record it in truth.json. ``cause``
    is planted on the component of the run's first fault of the matching kind."""
    out = Path(out_dir)
    trace, truth_path = out / "trace.jsonl", out / "truth.json"
    truth = json.loads(truth_path.read_text())
    hosts, gpus, nics = _placement(trace)
    rng = np.random.default_rng(seed + 7919)
    t0, t_end = truth["iteration_start_ns"][0], truth["end_ns"]
    planted: list[Planted] = []
    busy: set[str] = set()
    for f in truth["faults"]:
        busy.add(f["component"]["id"])
        busy.update(f["component"]["id"].split("/")[:1])
    if cause is not None:
        if cause not in CAUSES:
            raise SimError(f"health cause {cause!r} is not one of {', '.join(CAUSES)}")
        _, fault_kind, _ = CAUSES[cause]
        fault = next((f for f in truth["faults"] if f["kind"] == fault_kind), None)
        if fault is None:
            raise SimError(f"health cause {cause} stands behind a {fault_kind} fault: inject "
                           f"one (--fault {fault_kind}:auto@N)")
        planted.append(Planted(cause, fault["component"]["id"], fault["onset_ns"], False))
    pools = {"gpu": [g for g in gpus if g not in busy and g.split("/")[0] not in busy],
             "host": [h for h in hosts if h not in busy],
             "nic": [n for n in nics if n not in busy and n.split("/")[0] not in busy]}
    for i in range(decoys):
        kind = decoy_causes[i % len(decoy_causes)]
        pool = pools[CAUSES[kind][0]]
        if not pool:
            continue
        target = pool.pop(int(rng.integers(len(pool))))
        onset = int(t0 + rng.uniform(0.2, 0.5) * (t_end - t0))
        planted.append(Planted(kind, target, onset, True))
    records = series(hosts, gpus, nics, t0, t_end, planted, interval_s=interval_s, rng=rng)
    with open(trace, "ab") as fh:
        for r in records:
            fh.write(orjson.dumps(r.to_json()) + b"\n")
    truth["health"] = {"interval_ns": int(interval_s * S), "records": len(records),
                       "planted": [p.to_json() for p in planted]}
    truth_path.write_text(json.dumps(truth, indent=1) + "\n")
    return planted


def series(hosts: list[str], gpus: list[str], nics: list[str], t0: int, t_end: int,
           planted: list[Planted], *, interval_s: float,
           rng: np.random.Generator) -> list[HealthRecord]:
    """Every component's samples from ``t0`` to ``t_end``, causes applied from their onset."""
    by_target = {p.target: p for p in planted}
    step = int(interval_s * S)
    out: list[HealthRecord] = []
    counters: dict[tuple[str, str], float] = {}
    for t in range(t0, t_end + 1, step):
        for g in gpus:
            out.append(_gpu(g, t, by_target.get(g), rng, counters, interval_s))
        for n in nics:
            out.append(_nic(n, t, by_target.get(n), rng, counters, interval_s))
        for h in hosts:
            out.append(_host(h, t, by_target.get(h), rng))
    return out


def _active(p: Planted | None, t: int, cause: str) -> bool:
    return p is not None and p.cause == cause and t >= p.onset_ns


def _gpu(g: str, t: int, p: Planted | None, rng: np.random.Generator,
         counters: dict[tuple[str, str], float], dt: float) -> HealthRecord:
    v = {"temp_c": round(62 + rng.normal(0, 1.5), 1),
         "sm_clock_mhz": round(1980 - abs(rng.normal(0, 5))), "sm_clock_max_mhz": 1980.0,
         "power_w": round(650 + rng.normal(0, 10), 1), "util_pct": 99.0, "pcie_gen": 5.0,
         "pcie_gen_max": 5.0, "pcie_width": 16.0, "pcie_width_max": 16.0,
         "remap_pending": 0.0, "remap_failure": 0.0}
    reasons: tuple[str, ...] = ()
    if _active(p, t, "thermal"):
        v.update(temp_c=91.0, sm_clock_mhz=1320.0)
        reasons = ("hw_slowdown", "hw_thermal_slowdown")
    if _active(p, t, "pcie_downtrain"):
        v["pcie_width"] = 8.0
    key = (g, "ecc")
    counters[key] = counters.get(key, 0.0) + (20 * dt if _active(p, t, "ecc_storm") else 0.0)
    v["ecc_dram_corr_vol"] = counters[key]
    return HealthRecord(g.split("/")[0], t, g, v, reasons)


def _nic(n: str, t: int, p: Planted | None, rng: np.random.Generator,
         counters: dict[tuple[str, str], float], dt: float) -> HealthRecord:
    noisy = _active(p, t, "noisy_ib_port")
    for name, base, rate in (("symbol_error", 3, 5), ("port_rcv_errors", 1, 1)):
        key = (n, name)
        counters[key] = counters.get(key, float(base)) + (rate * dt if noisy else 0.0)
    v = {"up": 1.0, "rate_gbps": 400.0, "symbol_error": counters[(n, "symbol_error")],
         "port_rcv_errors": counters[(n, "port_rcv_errors")], "link_downed": 0.0,
         "port_xmit_wait": 0.0}
    return HealthRecord(n.split("/")[0], t, n, v)


def _host(h: str, t: int, p: Planted | None, rng: np.random.Generator) -> HealthRecord:
    cpu = 60.0 + rng.normal(0, 3) if _active(p, t, "cpu_contention") else abs(rng.normal(1, .5))
    return HealthRecord(h, t, "", {"psi_cpu_some_avg10": round(cpu, 2),
                                   "psi_memory_some_avg10": 0.0,
                                   "psi_io_full_avg10": round(abs(rng.normal(0.1, 0.05)), 2),
                                   "cpu_steal_pct": 0.0})
