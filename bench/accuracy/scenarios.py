"""The bench's seeded scenarios: for each size, every fault kind several times (subtle and gross,
varied targets, onsets mid-run, some intermittent), several faults at once, and healthy runs."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np

from diagnosis.sim.config import FAULT_KINDS, FaultSpec, SimConfig

SLOW_KINDS = [k for k, v in FAULT_KINDS.items() if v.slows]
LINK_TARGETS = ("cable", "uplink")
SWITCH_TARGETS = ("leaf", "spine")


@dataclass(frozen=True)
class Scenario:
    name: str
    label: str          # fault kind, "multi" or "healthy": the row of the table
    gpus: int
    cfg: SimConfig


def base_config(gpus: int, quick: bool, conns: bool) -> SimConfig:
    """The job: TP 8 inside a host, 4 pipeline stages, data parallel over the rest."""
    iterations = 30 if quick or gpus > 1024 else 40
    return SimConfig(gpus=gpus, gpus_per_host=8, tp=8, pp=4, iterations=iterations,
                     microbatches=2, conns=conns, job=f"bench{gpus}")


def _fault(kind: str, k: int, rng: np.random.Generator, base: SimConfig) -> FaultSpec:
    iterations = base.iterations
    onset = int(rng.integers(int(iterations * 0.35), int(iterations * 0.6) + 1))
    spines = base.hosts > base.hosts_per_leaf      # else one leaf per rail, no uplinks
    target = "auto"
    if FAULT_KINDS[kind].component == "link":
        target = LINK_TARGETS[k % 2] if spines else "cable"
    elif FAULT_KINDS[kind].component == "switch":
        target = SWITCH_TARGETS[k % 2] if spines else "leaf"
    if not FAULT_KINDS[kind].slows:
        return FaultSpec(kind, target, onset)
    # alternate gross (1.5-3x) and subtle (10-25% slower) fail-slow; every third intermittent
    slow = float(rng.uniform(1.5, 3.0) if k % 2 == 0 else rng.uniform(1.10, 1.25))
    every, on = (4, 2) if k % 3 == 2 else (0, 0)
    return FaultSpec(kind, target, onset, slow=round(slow, 3), every=every, on=on)


def scenarios(sizes: list[int], seeds: int, quick: bool, conns: bool = True,
              kinds: list[str] | None = None) -> list[Scenario]:
    out: list[Scenario] = []
    kinds = kinds or list(FAULT_KINDS)
    for gpus in sizes:
        base = base_config(gpus, quick, conns)
        for kind in [*kinds, "multi"]:
            for k in range(seeds):
                seed = zlib.crc32(f"{kind}/{gpus}/{k}".encode())
                rng = np.random.default_rng(seed)
                if kind == "multi":
                    faults = (_fault("slow_gpu", k, rng, base),
                              _fault("slow_link", k + 1, rng, base))
                else:
                    faults = (_fault(kind, k, rng, base),)
                out.append(Scenario(f"{kind}-{gpus}-{k}", kind, gpus,
                                    replace(base, seed=seed, faults=faults)))
        for k in range(max(1, seeds)):
            out.append(Scenario(f"healthy-{gpus}-{k}", "healthy", gpus,
                                replace(base, seed=zlib.crc32(f"healthy/{gpus}/{k}".encode()))))
    return out
