"""The peer model's refit time: health vectors of a job (one row per GPU, NIC port or host),
fit and score, CPU seconds. Target: a 4,096-node job's refit in at most 1 s.

    python -m bench.health_model [--nodes 256,1024,4096] [--gpus-per-node 8] [--repeat 3]

Rows are drawn like a healthy job under load (temperatures, clocks, power, utilisation, PCIe
replay and ECC rates with small noise) with one GPU planted hot and clocked down; the table says
whether the model named it, and the features it named. "hosts" is one row per node (PSI, steal);
"gpus" one per GPU: a 4,096-node job with 8 GPUs each is 32,768 rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from diagnosis.health.peers import PeerModel


def gpu_vectors(n: int, seed: int = 0) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    temp = 62 + rng.normal(0, 1.5, n)
    clock = 1980 - np.abs(rng.normal(0, 5, n))
    power = 650 + rng.normal(0, 10, n)
    util = np.minimum(100, 99 + rng.normal(0, 0.5, n))
    mem = 70 + rng.normal(0, 2, n)
    replays = np.abs(rng.normal(0, 0.001, n))
    out = {f"node{i // 8:05d}/gpu{i % 8}": {
        "temp_c": float(temp[i]), "sm_clock_mhz": float(clock[i]), "power_w": float(power[i]),
        "util_pct": float(util[i]), "mem_temp_c": float(mem[i]), "pcie_width": 16.0,
        "pcie_replays_per_s": float(replays[i]), "ecc_dram_corr_vol_per_s": 0.0}
        for i in range(n)}
    planted = f"node{(n // 3) // 8:05d}/gpu{(n // 3) % 8}"
    out[planted].update(temp_c=91.0, sm_clock_mhz=1110.0)
    return out


def host_vectors(n: int, seed: int = 0) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    cpu = np.abs(rng.normal(1.0, 0.5, n))
    out = {f"node{i:05d}": {"psi_cpu_some_avg10": float(cpu[i]), "psi_memory_some_avg10": 0.0,
                            "psi_io_full_avg10": float(abs(rng.normal(0.1, 0.05))),
                            "cpu_steal_pct": 0.0} for i in range(n)}
    out[f"node{n // 3:05d}"]["psi_cpu_some_avg10"] = 60.0
    return out


def run(nodes: list[int], gpus_per_node: int, repeat: int) -> Table:
    table = Table(title="peer model refit (fit + score), CPU seconds")
    for col in ("job nodes", "rows", "kind", "best of", "CPU s", "named", "features"):
        table.add_column(col)
    model = PeerModel()
    for n in nodes:
        for kind, vecs in (("hosts", host_vectors(n)), ("gpus", gpu_vectors(n * gpus_per_node))):
            best = float("inf")
            for _ in range(repeat):
                t0 = time.process_time()
                out = model.outliers(vecs)
                best = min(best, time.process_time() - t0)
            named = ", ".join(o.target for o in out) or "-"
            feats = "; ".join(",".join(f[0] for f in o.features) for o in out) or "-"
            table.add_row(str(n), str(len(vecs)), kind, str(repeat), f"{best:.3f}", named, feats)
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="256,1024,4096")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    Console(width=160).print(run([int(x) for x in a.nodes.split(",")], a.gpus_per_node, a.repeat))


if __name__ == "__main__":
    main()
