"""What a placement means for the collectives: each flow runs at its demand divided by the
worst load on its path (links share fairly when oversubscribed), and a ring collective runs at
the pace of its slowest flow."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from traffic_planner.problem import Problem


@dataclass(frozen=True)
class RingPrediction:
    group: str
    ranks: int               # flows in the ring (one per rank)
    bottleneck_gbps: float   # rate of the slowest flow
    seconds: float           # an all-reduce of ``nbytes``
    busbw_gbytes: float      # bus bandwidth, GB/s (nccl-tests' definition)


def flow_rates(problem: Problem, choice: Sequence[int]) -> list[float]:
    util = problem.loads(choice)
    return [problem.demand[f] / max(1.0, max(util[a] for a in problem.path_arcs(f, k)))
            for f, k in enumerate(choice)]


def predict_rings(problem: Problem, choice: Sequence[int], nbytes: float) -> list[RingPrediction]:
    """Ring all-reduce of ``nbytes`` per group of flows (flow ids ``GROUP:...``): each rank
    sends 2(n-1)/n of the buffer over its ring link, so time = 2(n-1)/n * bytes / bottleneck,
    and bus bandwidth = the bottleneck rate. Slowest group first."""
    rates = flow_rates(problem, choice)
    groups: dict[str, list[float]] = defaultdict(list)
    for f, flow in enumerate(problem.flows):
        groups[flow.group].append(rates[f])
    out = []
    for g, rs in groups.items():
        n, slow = len(rs), min(rs)
        factor = 2 * (n - 1) / n if n > 1 else 1.0
        seconds = factor * nbytes * 8 / (slow * 1e9)
        out.append(RingPrediction(g, n, slow, seconds, slow / 8))
    return sorted(out, key=lambda r: (r.bottleneck_gbps, r.group))
