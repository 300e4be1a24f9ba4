"""The bench's seeded scenarios: for each size, every fault kind several times (subtle and gross,
varied targets, onsets mid-run, some intermittent), several faults at once, and healthy runs,
on one fabric."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from c4.topology.model import TIERS
from diagnosis.sim.config import FAULT_KINDS, FaultSpec, SimConfig

SLOW_KINDS = [k for k, v in FAULT_KINDS.items() if v.slows]
LINK_TARGETS = ("cable", "uplink")


@dataclass(frozen=True)
class Scenario:
    name: str
    label: str          # fault kind, "multi" or "healthy": the row of the table
    gpus: int
    cfg: SimConfig


@dataclass(frozen=True)
class JobShape:
    """How the job is laid out: by default TP 8 inside a host, 4 pipeline stages, data
    parallel over the rest."""
    gpus_per_host: int = 8
    tp: int = 8
    pp: int = 4
    microbatches: int = 2


def base_config(gpus: int, quick: bool, conns: bool, fabric: str = "rail",
                nics_per_host: int | None = None, paths: bool = True,
                shape: JobShape = JobShape(), layers: int = 1,
                topology: str | None = None, iterations: int | None = None) -> SimConfig:
    """``iterations``: the run's length (default 40, 30 past 1,024 GPUs or quick); onsets are
    drawn over its middle."""
    if iterations is None:
        iterations = 30 if quick or gpus > 1024 else 40
    return SimConfig(gpus=gpus, gpus_per_host=shape.gpus_per_host, tp=shape.tp, pp=shape.pp,
                     iterations=iterations, microbatches=shape.microbatches, conns=conns,
                     job=f"bench{gpus}", fabric=fabric, topology=topology,
                     nics_per_host=nics_per_host,
                     paths=paths, layers=layers)


@lru_cache(maxsize=8)
def fabric_targets(base: SimConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The link and switch target keywords that find a component on the job's traffic, read
    from its built fabric and connections: no uplinks or spines on one switch, or when the
    job fits under one leaf; a core only on a three-tier fabric whose traffic leaves a pod."""
    from diagnosis.sim.layout import Layout
    from diagnosis.sim.model import build_topology
    from diagnosis.sim.network import Connections

    topo = build_topology(base)
    net = Connections.build(Layout.build(base, topo), topo, np.random.default_rng(0),
                            base.nvlink_gbps)
    links = tuple(t for t in LINK_TARGETS
                  if any((t == "uplink") == net.is_uplink(lid) for lid in net.link_ids))
    tiers = {topo.graph.nodes[n].get("tier") for n, kind in net.node_kind.items()
             if kind == "switch"}
    return links, tuple(t for t in TIERS if t in tiers)


def _fault(kind: str, k: int, rng: np.random.Generator, base: SimConfig) -> FaultSpec:
    iterations = base.iterations
    onset = int(rng.integers(int(iterations * 0.35), int(iterations * 0.6) + 1))
    target = "auto"
    comp = FAULT_KINDS[kind].component
    if comp in ("link", "switch"):
        # cycle through the kinds of link and tiers of switch the job's traffic crosses
        links, tiers = fabric_targets(base)
        pool = links if comp == "link" else tiers
        target = pool[k % len(pool)] if pool else "auto"
    if not FAULT_KINDS[kind].slows:
        return FaultSpec(kind, target, onset)
    # alternate gross (1.5-3x) and subtle (10-25% slower) fail-slow; every third intermittent
    slow = float(rng.uniform(1.5, 3.0) if k % 2 == 0 else rng.uniform(1.10, 1.25))
    every, on = (4, 2) if k % 3 == 2 else (0, 0)
    return FaultSpec(kind, target, onset, slow=round(slow, 3), every=every, on=on)


def scenarios(sizes: list[int], seeds: int, quick: bool, conns: bool = True,
              kinds: list[str] | None = None, fabric: str = "rail",
              nics_per_host: int | None = None, paths: bool = True,
              shape: JobShape = JobShape(), layers: int = 1,
              topology: str | None = None, iterations: int | None = None
              ) -> list[Scenario]:
    out: list[Scenario] = []
    kinds = kinds or list(FAULT_KINDS)
    for gpus in sizes:
        base = base_config(gpus, quick, conns, fabric, nics_per_host, paths, shape, layers,
                           topology, iterations)
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
