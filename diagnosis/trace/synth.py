"""A small synthetic data-parallel x tensor-parallel job, for the engine's tests and benches.

Not the simulator (that is ``diagnosis.sim``): a few dozen lines of timing model with known truth.
Each iteration a rank computes, joins its host's tensor-parallel all-reduce ``steps`` times, then
joins its data-parallel all-reduce (one ring per local GPU index, across hosts) whose ring
connections cross the topology. Noise: lognormal jitter, warm-up, a checkpoint step slow on
every rank, rare one-off pauses. Faults are planted by iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from c4.topology import Topology, rail_optimized
from diagnosis.trace.writer import TraceWriter

INF = np.iinfo(np.int64).max // 4


@dataclass
class SynthJob:
    hosts: int = 8
    gpus_per_host: int = 4
    iterations: int = 40
    steps: int = 4                   # tensor-parallel all-reduces per iteration
    compute_ms: float = 200.0        # per step
    tp_ms: float = 2.0
    dp_bytes: int = 256 << 20
    nic_gbps: float = 100.0
    jitter: float = 0.03
    warmup: tuple[float, ...] = (2.5, 1.4)
    checkpoint_every: int = 15
    checkpoint_ms: float = 400.0
    pause_rate: float = 0.003        # one-off pauses per rank per step
    pause_ms: tuple[float, float] = (20.0, 200.0)
    conns: bool = True
    seed: int = 0
    hosts_per_leaf: int = 4
    spines: int = 2
    t0_ns: int = 1_700_000_000_000_000_000
    # faults
    slow_ranks: dict[int, float] = field(default_factory=dict)   # rank -> factor
    slow_hosts: dict[int, float] = field(default_factory=dict)   # host index -> factor
    slow_components: dict[str, float] = field(default_factory=dict)  # nic/link id -> factor
    onset: int = 15
    hang_rank: int | None = None       # stops before its first step at ``onset``
    comm_hang_group: int | None = None  # dp group whose all-reduce at ``onset`` never finishes
    comm_hang_src: int | None = None    # ... only this rank's outgoing transfer stalls
    error_rank: int | None = None       # fails its dp all-reduce at ``onset``
    tail_s: float = 30.0               # recording goes on after the job stops

    @property
    def world(self) -> int:
        return self.hosts * self.gpus_per_host

    def topology(self) -> Topology:
        return rail_optimized(self.hosts, self.gpus_per_host, hosts_per_leaf=self.hosts_per_leaf,
                              spines=self.spines, nic_gbps=self.nic_gbps)

    def write(self, path: str | Path, topology: Topology | None = None) -> int:
        """Write the trace; returns the number of lines."""
        topo = topology or self.topology()
        with TraceWriter(path) as w:
            _Run(self, topo, w).run()
            return w.lines


class _Run:
    def __init__(self, job: SynthJob, topo: Topology, w: TraceWriter) -> None:
        self.j, self.topo, self.w = job, topo, w
        self.rng = np.random.default_rng(job.seed)
        place = topo.default_placement(job.world)
        self.place = place
        G, H = job.gpus_per_host, job.hosts
        self.tp = [list(range(h * G, (h + 1) * G)) for h in range(H)]
        self.dp = [list(range(t, job.world, G)) for t in range(G)]
        self.slow = np.ones(job.world)
        for r, f in job.slow_ranks.items():
            self.slow[r] = f
        for h, f in job.slow_hosts.items():
            self.slow[h * G:(h + 1) * G] = f
        # each ring connection's path (one ECMP candidate) and its slowdown under the faults
        self.ring: list[list[tuple[int, int, list[str] | None, float]]] = []
        for members in self.dp:
            conns = []
            for i, s in enumerate(members):
                d = members[(i + 1) % len(members)]
                a, b = place[s][2], place[d][2]
                cands = topo.paths(a, b) if a and b and a != b else []
                path = cands[(s * 7 + d) % len(cands)] if cands else None
                factor = 1.0
                if path:
                    comps = set(path) | set(topo.path_links(path))
                    for c, f in job.slow_components.items():
                        if c in comps:
                            factor = max(factor, f)
                conns.append((s, d, path, factor))
            self.ring.append(conns)

    def run(self) -> None:
        j, w = self.j, self.w
        w.meta("synth")
        for r in range(j.world):
            host, gpu, nic = self.place[r]
            w.rank(r, host, gpu, nic)
        for h, m in enumerate(self.tp):
            w.group(f"tp.{h}", m)
        for t, m in enumerate(self.dp):
            w.group(f"dp.{t}", m)
        free = np.full(j.world, j.t0_ns, dtype=np.int64)
        tp_seq = [0] * j.hosts
        last = j.t0_ns
        for it in range(j.iterations):
            warm = j.warmup[it] if it < len(j.warmup) else 1.0
            faulty = it >= j.onset
            for step in range(j.steps):
                c = self._compute(warm, faulty)
                if step == 0 and it > 0 and j.checkpoint_every and it % j.checkpoint_every == 0:
                    c += j.checkpoint_ms * 1e6
                ready = np.where(free >= INF, INF, free + c.astype(np.int64))
                if faulty and step == 0 and it == j.onset and j.hang_rank is not None:
                    ready[j.hang_rank] = INF
                for h, m in enumerate(self.tp):
                    free[m] = self._collective(f"tp.{h}", tp_seq[h], m, ready[m],
                                               j.tp_ms * 1e6, 32 << 20)
                    tp_seq[h] += 1
            ready = np.where(free >= INF, INF, free + (self._compute(warm, faulty) * 0.1)
                             .astype(np.int64))
            for t, m in enumerate(self.dp):
                free[m] = self._dp(t, it, m, ready[m], faulty and it == j.onset)
            done = free[free < INF]
            if len(done):
                last = max(last, int(done.max()))
            if not len(done):
                break
        w.end(last + int(j.tail_s * 1e9))

    def _compute(self, warm: float, faulty: bool) -> np.ndarray:
        j = self.j
        c = j.compute_ms * 1e6 * warm * self.rng.lognormal(0.0, j.jitter, j.world)
        if faulty:
            c = c * self.slow
        pause = self.rng.random(j.world) < j.pause_rate
        c[pause] += self.rng.uniform(*j.pause_ms, pause.sum()) * 1e6
        return c

    def _collective(self, pg: str, seq: int, members: list[int], enter: np.ndarray,
                    xfer_ns: float, nbytes: int, status: dict[int, str] | None = None
                    ) -> np.ndarray:
        """Rows of one collective; returns each member's end (INF when it never ends)."""
        present = enter < INF
        if not present.all():
            for r, e, p in zip(members, enter.tolist(), present.tolist()):
                if p:
                    self.w.op(r, pg, seq, "all_reduce", nbytes, e)
            return np.full(len(members), INF, dtype=np.int64)
        end = int(enter.max() + xfer_ns * self.rng.lognormal(0.0, self.j.jitter))
        for r, e in zip(members, enter.tolist()):
            self.w.op(r, pg, seq, "all_reduce", nbytes, e, end)
        return np.full(len(members), end, dtype=np.int64)

    def _dp(self, t: int, it: int, members: list[int], enter: np.ndarray, at_onset: bool
            ) -> np.ndarray:
        j, w = self.j, self.w
        pg = f"dp.{t}"
        if (enter >= INF).any():
            return self._collective(pg, it, members, enter, 0, j.dp_bytes)
        if at_onset and j.error_rank is not None and j.error_rank in members:
            for r, e in zip(members, enter.tolist()):
                if r == j.error_rank:
                    w.op(r, pg, it, "all_reduce", j.dp_bytes, e, e + 5_000_000, status="error")
                else:
                    w.op(r, pg, it, "all_reduce", j.dp_bytes, e)
            return np.full(len(members), INF, dtype=np.int64)
        start = int(enter.max())
        per = j.dp_bytes // len(members)
        base = per * 8 / j.nic_gbps            # ns at line rate
        stall = at_onset and j.comm_hang_group == t
        ends = []
        for s, d, path, factor in self.ring[t]:
            f = factor if it >= j.onset else 1.0
            dur = base * f * self.rng.lognormal(0.0, j.jitter)
            end = start + int(dur)
            dead = stall and (j.comm_hang_src is None or s == j.comm_hang_src)
            if j.conns:
                w.conn(s, d, per, start, None if dead else end, pg=pg, seq=it, path=path)
            ends.append(INF if dead else end)
        if stall:
            for r, e in zip(members, enter.tolist()):
                w.op(r, pg, it, "all_reduce", j.dp_bytes, e)
            return np.full(len(members), INF, dtype=np.int64)
        end = max(ends) + 100_000
        for r, e in zip(members, enter.tolist()):
            w.op(r, pg, it, "all_reduce", j.dp_bytes, e, end)
        return np.full(len(members), end, dtype=np.int64)
