"""Plan flows on a fabric: the ECMP baseline, the planned paths (and RoCE source ports), the
lower bound, and the plan file (shared specs section 4)."""

from __future__ import annotations

import contextlib
import gc
import logging
import statistics
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from c4.jsonfile import read_json
from c4.topology import Topology
from traffic_planner.bound import Bound, lower_bound
from traffic_planner.errors import FlowFormatError
from traffic_planner.flows import Flow
from traffic_planner.hashing import EcmpModel
from traffic_planner.problem import Problem, build_problem
from traffic_planner.solver import Solution, SolverConfig, replan, solve

log = logging.getLogger(__name__)


@dataclass
class EcmpBaseline:
    seeds: list[int]
    max_loads: list[float]
    choices: list[list[int]]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.max_loads) if self.max_loads else 0.0

    @property
    def worst(self) -> float:
        return max(self.max_loads, default=0.0)


@dataclass
class PlanResult:
    problem: Problem
    solution: Solution
    bound: Bound | None
    ecmp: EcmpBaseline | None
    sports: list[int | None] | None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def max_link_load(self) -> float:
        return self.solution.max_load

    def path(self, f: int) -> list[str]:
        return self.problem.path(f, self.solution.choice[f])

    def to_json(self) -> dict[str, Any]:
        """The plan object of shared specs section 4 (``udp_sport``: optional, RoCE only)."""
        items = []
        for f, flow in enumerate(self.problem.flows):
            item: dict[str, Any] = {**flow.to_json(), "path": self.path(f)}
            if self.sports is not None and self.sports[f] is not None:
                item["udp_sport"] = self.sports[f]
            items.append(item)
        return {"plan": items,
                "max_link_load": round(self.max_link_load, 6),
                "ecmp_max_link_load": round(self.ecmp.mean, 6) if self.ecmp else None,
                "lower_bound": round(self.bound.value, 6) if self.bound else None}


def ecmp_baseline(problem: Problem, seeds: Iterable[int] = range(8),
                  model: EcmpModel | None = None) -> EcmpBaseline:
    """Max link load when every flow takes the path the modelled hash gives it, with random
    source ports drawn from each seed."""
    model = model or EcmpModel(problem)
    seeds = list(seeds)
    choices = [model.place(model.random_sports(s)) for s in seeds]
    loads = [max(problem.loads(c), default=0.0) for c in choices]
    return EcmpBaseline(seeds, loads, choices)


def plan_flows(topology: Topology, flows: Sequence[Flow], down: Iterable[str] = (), *,
               previous: Mapping[str, Sequence[str]] | None = None, roce: bool = True,
               ecmp_seeds: int = 8, with_bound: bool = True,
               cfg: SolverConfig | None = None) -> PlanResult:
    """Plan ``flows`` avoiding ``down`` links. With ``previous`` (flow id -> path of an earlier
    plan), re-plan incrementally: flows whose path survives keep it where possible.

    Raises:
        NoPathError: a flow has no path left (the message names it).
        FlowFormatError, UnknownLinkError: a flow or down link that is not in the topology.
    """
    with _no_gc():
        return _plan(topology, flows, down, previous, roce, ecmp_seeds, with_bound, cfg)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Planning allocates millions of small tuples and lists that live until it returns; the
    cyclic collector would scan them again and again (a fifth of the time at 2,048 hosts)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _plan(topology: Topology, flows: Sequence[Flow], down: Iterable[str],
          previous: Mapping[str, Sequence[str]] | None, roce: bool, ecmp_seeds: int,
          with_bound: bool, cfg: SolverConfig | None) -> PlanResult:
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    problem = build_problem(topology, flows, down)
    times["paths"] = time.perf_counter() - t0
    bound = None
    if with_bound:
        t = time.perf_counter()
        bound = lower_bound(problem)
        times["bound"] = time.perf_counter() - t
    target = bound.unsplittable if bound else 0.0
    t = time.perf_counter()
    if previous is None:
        sol = solve(problem, target=target, cfg=cfg)
    else:
        sol = replan(problem, [previous.get(f.id) for f in problem.flows], target=target,
                     cfg=cfg)
    times["solve"] = time.perf_counter() - t
    ecmp: EcmpBaseline | None = None
    sports: list[int | None] | None = None
    if roce or ecmp_seeds:
        t = time.perf_counter()
        model = EcmpModel(problem)
        times["hash_model"] = time.perf_counter() - t
        if roce:
            t = time.perf_counter()
            sports = model.pin_ports(sol.choice)
            times["ports"] = time.perf_counter() - t
        if ecmp_seeds:
            t = time.perf_counter()
            ecmp = ecmp_baseline(problem, range(ecmp_seeds), model)
            times["ecmp"] = time.perf_counter() - t
    log.info("plan: %d flows, max load %.4f (%d links), bound %s, moved %d, times %s",
             len(flows), sol.max_load, sol.at_max, bound and round(bound.value, 4), sol.moved,
             {k: round(v, 3) for k, v in times.items()})
    return PlanResult(problem, sol, bound, ecmp, sports, times)


def load_plan_paths(path: str | Path) -> dict[str, list[str]]:
    """Flow id -> path from a plan file written by ``c4 plan --format json``."""
    path = Path(path)
    obj = read_json(path, "plan file", FlowFormatError)
    if not isinstance(obj, dict) or not isinstance(obj.get("plan"), list):
        raise FlowFormatError('expected an object {"plan": [...]}', source=str(path),
                              field="plan")
    out = {}
    for i, item in enumerate(obj["plan"]):
        if not isinstance(item, dict) or not isinstance(item.get("path"), list):
            raise FlowFormatError("plan entry has no path", source=str(path),
                                  field=f"plan[{i}].path")
        if "id" not in item:
            raise FlowFormatError("plan entry has no id", source=str(path), field=f"plan[{i}].id")
        out[str(item["id"])] = [str(n) for n in item["path"]]
    return out
