"""Flows from a job's layout (data-parallel rings, pipeline pairs, expert all-to-all) or from the
connections a trace observed (shared specs section 2, ``conn`` and ``rank`` records)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from c4.settings import at_least, setting, validate
from traffic_planner.errors import ConfigError, FlowFormatError, PlannerError
from traffic_planner.flows import Flow

if TYPE_CHECKING:
    from c4.topology import Topology


@dataclass(frozen=True)
class Parallelism:
    """A Megatron-style layout: rank = tp + TP * (dp + DP * pp); expert-parallel groups are
    runs of ``ep`` consecutive data-parallel ranks."""

    tp: int = setting(8, flag="--tp", check=at_least(1),
                      help="Tensor-parallel size (ranks within a host).")
    pp: int = setting(1, flag="--pp", check=at_least(1), help="Pipeline-parallel size.")
    ep: int = setting(1, flag="--ep", check=at_least(1),
                      help="Expert-parallel size (all-to-all groups).")

    def __post_init__(self) -> None:
        validate(self, ConfigError)

    def dp(self, world_size: int) -> int:
        if world_size % (self.tp * self.pp):
            raise PlannerError(f"world size {world_size} is not a multiple of tp*pp = "
                               f"{self.tp * self.pp}")
        dp = world_size // (self.tp * self.pp)
        if dp % self.ep:
            raise PlannerError(f"data-parallel size {dp} is not a multiple of ep = {self.ep}")
        return dp

    def groups(self, world_size: int) -> dict[str, tuple[str, list[int]]]:
        """Communicator name -> (pattern, ranks): ``ring`` (dp), ``pipe`` (pp), ``a2a`` (ep)."""
        dp = self.dp(world_size)

        def rank(t: int, d: int, p: int) -> int:
            return t + self.tp * (d + dp * p)

        out: dict[str, tuple[str, list[int]]] = {}
        for p in range(self.pp):
            for t in range(self.tp):
                if dp > 1:
                    out[f"dp.{p}.{t}"] = ("ring", [rank(t, d, p) for d in range(dp)])
                if self.ep > 1:
                    for e in range(dp // self.ep):
                        out[f"ep.{p}.{t}.{e}"] = ("a2a", [rank(t, d, p) for d in
                                                          range(e * self.ep, (e + 1) * self.ep)])
        if self.pp > 1:
            for d in range(dp):
                for t in range(self.tp):
                    out[f"pp.{d}.{t}"] = ("pipe", [rank(t, d, p) for p in range(self.pp)])
        return out


def group_flows(pg: str, pattern: str, ranks: Sequence[int], nic_of: Mapping[int, str | None],
                gbps: float) -> list[Flow]:
    """The flows of one communicator; pairs on the same NIC (or without one) send nothing over
    the fabric. ``a2a`` splits ``gbps`` evenly over a rank's peers."""
    if pattern == "ring":
        pairs = [(ranks[i], ranks[(i + 1) % len(ranks)]) for i in range(len(ranks))] \
            if len(ranks) > 1 else []
        rate = gbps
    elif pattern == "pipe":
        pairs = [p for i in range(len(ranks) - 1)
                 for p in ((ranks[i], ranks[i + 1]), (ranks[i + 1], ranks[i]))]
        rate = gbps
    elif pattern == "a2a":
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        rate = gbps / max(1, len(ranks) - 1)
    else:
        raise ValueError(f"unknown pattern {pattern!r}")
    out = []
    for a, b in pairs:
        src, dst = nic_of.get(a), nic_of.get(b)
        if src and dst and src != dst:
            out.append(Flow(f"{pg}:{a}>{b}", src, dst, rate))
    return out


def job_flows(topology: Topology, world_size: int, par: Parallelism, *, gbps: float = 400,
              hosts: Sequence[str] | None = None, job: str = "") -> list[Flow]:
    """Flows of a job of ``world_size`` ranks laid out as ``par`` on ``hosts`` (in that order;
    default: the topology's hosts, sorted), each host's GPUs in order, each GPU on its NIC."""
    nic_of = placement_nics(topology, world_size, hosts)
    prefix = f"{job}/" if job else ""
    flows: list[Flow] = []
    for pg, (pattern, ranks) in par.groups(world_size).items():
        flows.extend(group_flows(prefix + pg, pattern, ranks, nic_of, gbps))
    return flows


def placement_nics(topology: Topology, world_size: int,
                   hosts: Sequence[str] | None = None) -> dict[int, str | None]:
    if hosts is None:
        return {r: nic for r, (_, _, nic) in topology.default_placement(world_size).items()}
    slots: list[str | None] = []
    for h in hosts:
        gpus = topology.gpus(h)
        if not gpus:
            raise PlannerError(f"host {h!r} has no GPUs in the topology")
        slots.extend(topology.nic_of_gpu(g) for g in gpus)
    if len(slots) < world_size:
        raise PlannerError(f"{len(hosts)} hosts give {len(slots)} GPUs, fewer than the "
                           f"{world_size} ranks")
    return dict(enumerate(slots[:world_size]))


def observed_flows(trace: str | Path, topology: Topology, *,
                   gbps: float | None = None) -> list[Flow]:
    """Flows from a trace's ``conn`` records and ``rank`` placement: one flow per (src, dst, pg),
    its demand the observed rate (bytes over the span from first start to last end) unless
    ``gbps`` is given."""
    path = Path(trace)
    nic_of: dict[int, str] = {}
    stats: dict[tuple[int, int, str], list[float]] = defaultdict(lambda: [0.0, float("inf"), 0.0])
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FlowFormatError(f"not valid JSON: {exc.msg}", source=str(path),
                                      line=lineno) from exc
            kind = rec.get("type") if isinstance(rec, dict) else None
            try:
                if kind == "rank":
                    nic = rec.get("nic") or (topology.nic_of_gpu(rec["gpu"]) if rec.get("gpu")
                                             else None)
                    if nic:
                        nic_of[int(rec["rank"])] = nic
                elif kind == "conn":
                    key = (int(rec["src"]), int(rec["dst"]), str(rec.get("pg") or ""))
                    s = stats[key]
                    s[0] += float(rec["bytes"])
                    s[1] = min(s[1], float(rec["t_start_ns"]))
                    s[2] = max(s[2], float(rec.get("t_end_ns") or rec["t_start_ns"]))
            except KeyError as exc:
                raise FlowFormatError(f"{kind} record lacks a required field", source=str(path),
                                      line=lineno, field=str(exc.args[0])) from exc
            except (TypeError, ValueError) as exc:
                raise FlowFormatError(f"{kind} record has a malformed field: {exc}",
                                      source=str(path), line=lineno) from exc
    flows = []
    for (a, b, pg), (nbytes, t0, t1) in sorted(stats.items()):
        src, dst = nic_of.get(a), nic_of.get(b)
        if not src or not dst or src == dst:
            continue
        rate = gbps if gbps is not None else nbytes * 8 / max(t1 - t0, 1.0)  # bits/ns = Gbit/s
        if rate > 0:
            flows.append(Flow(f"{pg}:{a}>{b}" if pg else f"{a}>{b}", src, dst, rate))
    return flows
