"""Injected faults resolved against a job: which component, which ranks, which links, and what
each one does in a given iteration. Also what a correct report would name (ground truth)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from c4.topology import Topology, TopologyError
from diagnosis.sim.config import TARGET_KEYWORDS, FaultSpec, SimConfig, SimError
from diagnosis.sim.layout import Layout
from diagnosis.sim.network import Connections


@dataclass
class Fault:
    spec: FaultSpec
    component: dict[str, str]           # {"type": ..., "id": ...}
    accept: list[dict[str, str]]        # components a correct report may name for it
    onset: int                          # iteration
    rank: int = -1                      # the rank of a GPU fault
    ranks: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # compute-slowed
    links: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # into conns table
    step: int = -1                      # compute step in which a rank hangs
    pattern: np.ndarray | None = None   # random duty: active or not, per iteration

    @property
    def kind(self) -> str:
        return self.spec.kind

    def active(self, iteration: int) -> bool:
        if self.pattern is not None:
            return self.spec.active(iteration, self.onset) and bool(self.pattern[iteration])
        return self.spec.active(iteration, self.onset)

    @property
    def network(self) -> bool:
        return self.spec.info.component in ("nic", "link", "switch")

    def link_factor(self) -> float:
        return 0.0 if self.kind.startswith("dead_") else 1.0 / self.spec.slow


def resolve(cfg: SimConfig, lay: Layout, conns: Connections, topo: Topology,
            rng: np.random.Generator) -> list[Fault]:
    out = [_resolve_one(spec, cfg, lay, conns, topo, rng) for spec in cfg.faults]
    for n, f in enumerate(out):
        if f.spec.duty:
            # its own stream (seeded by the job and the fault's place), so that a random duty
            # changes no other draw of the simulation
            on = np.random.default_rng([cfg.seed, 6, n]).random(cfg.iterations) < f.spec.duty
            on[f.onset] = True
            f.pattern = on
    return out


def _resolve_one(spec: FaultSpec, cfg: SimConfig, lay: Layout, conns: Connections,
                 topo: Topology, rng: np.random.Generator) -> Fault:
    comp = spec.info.component
    onset = spec.onset if spec.onset is not None else cfg.iterations // 2
    if onset >= cfg.iterations:
        raise SimError(f"fault {spec.kind}: onset {onset} is past the last iteration "
                       f"({cfg.iterations - 1})")
    used = conns.link_ids
    if comp == "gpu":
        if spec.kind in ("comm_hang", "error") and lay.dp < 2:
            raise SimError(f"fault {spec.kind} strikes a data-parallel all-reduce; this job has "
                           "no data parallelism (raise --gpus or lower --tp/--pp)")
        if spec.target == "auto":
            rank = int(rng.integers(lay.world))
        elif spec.target.isdigit():
            rank = int(spec.target)
            if rank >= lay.world:
                raise SimError(f"fault {spec.kind}: rank {rank} is not in a {lay.world}-rank job")
        else:
            try:
                rank = lay.rank_of_gpu(spec.target)
            except KeyError as exc:
                raise SimError(f"fault {spec.kind}: {exc.args[0]}") from None
        gpu = lay.gpu[rank]
        steps = 2 * cfg.microbatches + 1
        return Fault(spec, {"type": "gpu", "id": gpu},
                     [{"type": "gpu", "id": gpu}, {"type": "rank", "id": str(rank)}], onset,
                     rank=rank, ranks=np.array([rank]),
                     step=int(rng.integers(steps)) if spec.kind == "rank_hang" else -1)
    if comp == "host":
        host = lay.hosts[int(rng.integers(len(lay.hosts)))] if spec.target == "auto" \
            else spec.target
        if host not in lay.hosts:
            raise SimError(f"fault {spec.kind}: host {host!r} runs no rank of this job")
        ranks = np.flatnonzero(lay.host_of == lay.hosts.index(host))
        return Fault(spec, {"type": "host", "id": host}, [{"type": "host", "id": host}], onset,
                     ranks=ranks)
    if not used:
        raise SimError(f"fault {spec.kind}: this job sends nothing over the network "
                       "(one host, or no data/pipeline parallelism across hosts)")
    ends = [lid.split("~") for lid in used]
    if comp == "nic":
        nics = sorted({e for pair in ends for e in pair if _kind(topo, e) == "nic"})
        nic = nics[int(rng.integers(len(nics)))] if spec.target == "auto" else spec.target
        _check(topo, nic, "nic", spec)
        # a NIC and its cable lie on exactly the same paths only when it is the NIC's one cable
        # (a dual-port NIC has two: a fault of the whole NIC is not one of either cable's)
        cables = _cables(topo, nic)
        accept = [{"type": "nic", "id": nic}]
        accept += [{"type": "link", "id": c} for c in cables if len(cables) == 1]
        return Fault(spec, {"type": "nic", "id": nic}, accept, onset,
                     links=conns.links_of_node(nic))
    if comp == "link":
        if spec.target in TARGET_KEYWORDS["link"]:
            pool = [lid for lid, (a, b) in zip(used, ends)
                    if spec.target == "auto"
                    or (spec.target == "cable") == ("nic" in (_kind(topo, a), _kind(topo, b)))]
            if not pool:
                raise SimError(f"fault {spec.kind}: the job's traffic crosses no "
                               f"{spec.target} on {cfg.fabric_label}; target "
                               f"{_offer(topo, used, 'link')}, auto or a link id")
            link = pool[int(rng.integers(len(pool)))]
        else:
            link = spec.target
            try:
                topo.endpoints(link)
            except TopologyError as exc:
                raise SimError(f"fault {spec.kind}: {exc}") from None
        accept = [{"type": "link", "id": link}]
        # likewise a cable stands for its NIC only when it is the NIC's one cable: a faulty
        # port of a dual-port NIC is named by its cable
        accept += [{"type": "nic", "id": e} for e in link.split("~")
                   if _kind(topo, e) == "nic" and _cables(topo, e) == [link]]
        idx = np.array([used.index(link)] if link in used else [], dtype=np.int64)
        return Fault(spec, {"type": "link", "id": link}, accept, onset, links=idx)
    # switch
    switches = sorted({e for pair in ends for e in pair if _kind(topo, e) == "switch"})
    if spec.target in TARGET_KEYWORDS["switch"]:
        pool = [s for s in switches
                if spec.target == "auto" or topo.graph.nodes[s].get("tier") == spec.target]
        if not pool:
            raise SimError(f"fault {spec.kind}: the job's traffic crosses no {spec.target} "
                           f"switch on {cfg.fabric_label}; target "
                           f"{_offer(topo, used, 'switch')}, auto or a switch id")
        sw = pool[int(rng.integers(len(pool)))]
    else:
        sw = spec.target
        _check(topo, sw, "switch", spec)
    return Fault(spec, {"type": "switch", "id": sw}, [{"type": "switch", "id": sw}], onset,
                 links=conns.links_of_node(sw))


def _kind(topo: Topology, node: str) -> str:
    return topo.graph.nodes[node].get("kind", "")


def _other(link: str, node: str) -> str:
    a, b = link.split("~")
    return b if a == node else a


def _cables(topo: Topology, nic: str) -> list[str]:
    """The NIC's links to the fabric (one per port)."""
    return [lk for lk in topo.links_of(nic) if _kind(topo, _other(lk, nic)) == "switch"]


def _offer(topo: Topology, used: list[str], comp: str) -> str:
    """The target keywords that do find a component on the job's traffic (error messages)."""
    if comp == "switch":
        words = {str(topo.graph.nodes[e].get("tier")) for lid in used for e in lid.split("~")
                 if _kind(topo, e) == "switch"}
    else:
        words = {"cable" if "nic" in (_kind(topo, a), _kind(topo, b)) else "uplink"
                 for a, b in (lid.split("~") for lid in used)}
    return ", ".join(sorted(words))


def _check(topo: Topology, node: str, kind: str, spec: FaultSpec) -> None:
    if node not in topo.graph or _kind(topo, node) != kind:
        raise SimError(f"fault {spec.kind}: {node!r} is not a {kind} of the topology")


def link_factors(faults: list[Fault], n_links: int, which: list[Fault]) -> np.ndarray:
    factor = np.ones(n_links)
    for f in which:
        if len(f.links):
            factor[f.links] = np.minimum(factor[f.links], f.link_factor())
    return factor


def truth_entry(f: Fault, conns: Connections, iteration_start: list[int],
                end_ns: int, seen: np.ndarray, gpus: list[str]) -> dict[str, Any]:
    """The ground-truth record of one fault (see diagnosis/sim/README.md). ``seen`` marks the
    connections that carried a transfer while the fault was active."""
    onset_ns = iteration_start[f.onset] if f.onset < len(iteration_start) else None
    stop = f.spec.end
    end = (iteration_start[stop] if stop is not None and stop < len(iteration_start) else None)
    observable = True
    ranks = f.ranks
    target: frozenset[int] = frozenset()
    if f.network:
        target = frozenset(np.flatnonzero(conns.crossing(f.links) & seen).tolist())
    elif f.kind == "comm_hang":
        target = frozenset([conns.dp0 + f.rank]) & frozenset(np.flatnonzero(seen).tolist())
    known = {(a["type"], a["id"]) for a in f.accept}
    equivalent = [{"type": t, "id": i} for t, i in conns.equivalents(target, seen)
                  if (t, i) not in known]
    if f.kind == "comm_hang":
        # a transfer stalled between two endpoints: its receiver is as likely as its sender
        peer = int(conns.dst[conns.dp0 + f.rank])
        equivalent += [{"type": "gpu", "id": gpus[peer]}, {"type": "rank", "id": str(peer)}]
    if f.network:
        alone = conns.bandwidth(link_factors([f], len(conns.link_ids), [f]))
        base = conns.bandwidth(np.ones(len(conns.link_ids)))
        hit = (alone < base * 0.995) & conns.inter
        observable = bool(hit.any())
        ranks = np.unique(np.concatenate([conns.src[hit], conns.dst[hit]]))
    return {
        "kind": f.kind,
        "component": f.component,
        "accept": f.accept,
        "equivalent": equivalent,
        "expected_report": f.spec.info.report,
        "ranks": [int(r) for r in ranks],
        "onset_iteration": f.onset,
        "onset_ns": onset_ns,
        "end_iteration": stop,
        "end_ns": end,
        "slow": f.spec.slow if f.spec.info.slows else None,
        "intermittent": _intermittent(f, len(iteration_start)),
        "observable": observable and onset_ns is not None and onset_ns < end_ns,
        "spec": _spec_text(f.spec),
    }


def _intermittent(f: Fault, iterations: int) -> dict[str, Any] | None:
    """How an intermittent fault comes and goes: its pattern (for a random duty, also the
    iterations simulated in which it was active)."""
    if f.spec.every:
        return {"every": f.spec.every, "on": f.spec.on}
    if f.pattern is None:
        return None
    return {"duty": f.spec.duty,
            "active": [i for i in range(f.onset, iterations) if f.active(i)]}


def _spec_text(s: FaultSpec) -> str:
    out = f"{s.kind}:{s.target}@{s.onset}"
    if s.info.slows:
        out += f",slow={s.slow:g}"
    if s.end is not None:
        out += f",end={s.end}"
    if s.every:
        out += f",every={s.every},on={s.on}"
    if s.duty:
        out += f",duty={s.duty:g}"
    return out
