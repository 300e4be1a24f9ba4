"""The timing model: one training iteration at a time, vectorized over ranks.

Per iteration (GPipe schedule): every microbatch runs forward through the stages, then backward;
each stage's compute ends in a tensor-parallel all-reduce; stages hand activations and gradients
on with blocking send/recv; then every data-parallel ring all-reduces the gradients, and the
optimizer steps. Causality: a collective's transfer starts when its last member enters; a
send/recv pair starts when both sides have entered; a rank enters its next call when its previous
call ended plus its compute. A time of +inf means "never": a hung rank never enters its next
call, so it has no op line, and peers that entered wait for ever (no ``t_end_ns``).

A rank's CPU launches its calls ahead of its GPU: every call of an iteration once it is past
the host synchronisation that ends the previous one (the optimizer step reads the loss and the
gradient norm on the host). The calls it launched that its GPU never reached are kept apart
(``Batch.launched``): NCCL RAS counts them. A hung rank is a hung process (a deadlock, a
stuck data loader, a debugger): its CPU launches nothing past the hang.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from c4.topology import Topology, TopologyError
from c4.topology.fabrics import build_fabric
from diagnosis.sim import faults as faultmod
from diagnosis.sim import layers as layermod
from diagnosis.sim.config import SimConfig, SimError
from diagnosis.sim.layout import Layout
from diagnosis.sim.network import Connections

log = logging.getLogger(__name__)

OP_NAMES = ["all_reduce", "send", "recv", layermod.ALL_GATHER, layermod.REDUCE_SCATTER]
AR, SEND, RECV = 0, 1, 2
STATUS_OK, STATUS_ERROR = 0, 2
ERROR_DELAY_NS = 2e6   # a failing transport reports within a couple of ms


@dataclass
class Batch:
    """The records of one iteration, sorted by time: op columns as ``c4.proto.codec.OP_COLUMNS``
    (absolute ns, -1 for unknown) and conn columns (``conn`` indexes :class:`Connections`)."""

    iteration: int
    ops: dict[str, np.ndarray]
    conns: dict[str, np.ndarray]
    #: calls the ranks' CPUs launched that their GPUs never entered (stuck behind an earlier
    #: call), in each rank's program order: rank, pg, op, peer, and ``t_launch_ns`` (when the
    #: CPU began the iteration)
    launched: dict[str, np.ndarray] = field(default_factory=dict)


def build_topology(cfg: SimConfig) -> Topology:
    """The job's fabric (``cfg.fabric``); ``uplink_gbps`` sets every switch-to-switch link.
    With ``cfg.topology``, the imported topology fitted to the job (diagnosis.sim.imported)."""
    if cfg.topology is not None:
        from diagnosis.sim.imported import load_fitted
        return load_fitted(cfg.topology, cfg.gpus, cfg.gpus_per_host, cfg.nic_gbps,
                           cfg.uplink_gbps)
    three = cfg.fabric == "three_tier"
    try:
        return build_fabric(cfg.fabric, cfg.hosts, cfg.gpus_per_host,
                            nics_per_host=cfg.nics_per_host, hosts_per_leaf=cfg.hosts_per_leaf,
                            nic_gbps=cfg.nic_gbps, uplink_gbps=cfg.uplink_gbps,
                            core_gbps=cfg.uplink_gbps if three else None)
    except TopologyError as exc:
        raise SimError(f"--fabric {cfg.fabric}: {exc}") from None


class _Acc:
    """Column chunks of one iteration."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.chunks: list[list[np.ndarray]] = []

    def add(self, n: int, **cols: Any) -> None:
        self.chunks.append([np.asarray(cols[k]).reshape(-1) if np.ndim(cols[k])
                            else np.full(n, cols[k]) for k in self.names])

    def columns(self) -> dict[str, np.ndarray]:
        if not self.chunks:
            return {k: np.empty(0) for k in self.names}
        return {k: np.concatenate([c[i] for c in self.chunks]) for i, k in enumerate(self.names)}


_OP_FIELDS = ("rank", "pg", "seq", "op", "nbytes", "t_enter_ns", "t_start_ns", "t_end_ns",
              "status", "peer")
_CONN_FIELDS = ("conn", "bytes", "t_start_ns", "t_end_ns", "pg", "seq")


class Simulation:
    """A seeded simulated job; iterate :meth:`run` for its records, one :class:`Batch` per
    iteration, then read :attr:`end_ns` and :meth:`truth`."""

    def __init__(self, cfg: SimConfig, topo: Topology | None = None) -> None:
        self.cfg = cfg
        self.topo = topo if topo is not None else build_topology(cfg)
        self.lay = Layout.build(cfg, self.topo)
        self.conns = Connections.build(self.lay, self.topo, np.random.default_rng([cfg.seed, 1]),
                                       cfg.nvlink_gbps)
        self.faults = faultmod.resolve(cfg, self.lay, self.conns, self.topo,
                                       np.random.default_rng([cfg.seed, 2]))
        self.rng = np.random.default_rng([cfg.seed, 3])
        W, D, P, T = self.lay.world, self.lay.dp, self.lay.pp, self.lay.tp
        self.shape = (D, P, T)
        self.strings = OP_NAMES + [name for name, _ in self.lay.groups]
        tp_g, pp_g, dp_g = self.lay.group_ids()
        off = len(OP_NAMES)
        self.tp_g = (tp_g + off).reshape(self.shape)
        self.pp_g = (pp_g + off).reshape(self.shape)
        self.dp_g = (dp_g + off).reshape(self.shape)
        self.ranks3 = np.arange(W).reshape(self.shape)
        self.speed = np.exp(self.rng.normal(0.0, cfg.gpu_spread, W))
        host_skew = self.rng.uniform(-cfg.clock_skew_us, cfg.clock_skew_us, len(self.lay.hosts))
        self.skew = np.round(host_skew[self.lay.host_of] * 1e3).astype(np.int64)
        self.free = self.rng.uniform(0.0, 2e6, W)       # ranks start within 2 ms
        self.iteration_start: list[int] = []
        self.last = 0.0
        self.stalled = False
        self._bw_cache: dict[tuple[int, ...], np.ndarray] = {}
        # per fault: connections that carried a transfer while it was active
        self.seen = [np.zeros(len(self.conns), bool) for _ in self.faults]
        # benign transient congestion (other tenants' traffic) on uplinks: (link, until, keep)
        self.crng = np.random.default_rng([cfg.seed, 4])
        self.uplinks = np.array([i for i, lid in enumerate(self.conns.link_ids)
                                 if self.conns.is_uplink(lid)], dtype=np.int64)
        self.congestion: list[tuple[int, int, float]] = []
        self.congestion_log: list[dict] = []
        # when a hang actually happened (relative ns): ("rank", r) or ("fault", index)
        self.events: dict[tuple[str, int], float] = {}
        # a dead NIC or link dies at a moment inside its onset iteration (relative ns): transfers
        # crossing it that are still in flight then, or start later, never end
        self.death: dict[int, float] = {}
        self.drng = np.random.default_rng([cfg.seed, 5])
        self.dead_mask = {n: self.conns.crossing(f.links) for n, f in enumerate(self.faults)
                          if f.kind.startswith("dead_")}
        self.done = False

    # ----- public ---------------------------------------------------------------------------
    def run(self) -> Iterator[Batch]:
        for i in range(self.cfg.iterations):
            if not np.isfinite(self.free).any():
                break
            yield self._iteration(i)
        self.done = True

    @property
    def end_ns(self) -> int:
        """When recording stopped: shortly after the last event, or ``hang_wait_s`` after the
        job stopped moving."""
        wait = self.cfg.hang_wait_s * 1e9 if self.stalled else 1e6
        return self.cfg.t0_ns + int(self.last + wait)

    def truth(self) -> list[dict]:
        out = []
        for n, (f, seen) in enumerate(zip(self.faults, self.seen)):
            entry = faultmod.truth_entry(f, self.conns, self.iteration_start, self.end_ns, seen,
                                         self.lay.gpu)
            t = self.events.get(("fault", n), self.events.get(("rank", f.rank)))
            if f.kind in ("rank_hang", "comm_hang", "error") or f.kind.startswith("dead_"):
                entry["event_ns"] = None if t is None else self.cfg.t0_ns + int(t)
            else:
                entry["event_ns"] = entry["onset_ns"]
            out.append(entry)
        return out

    # ----- one iteration --------------------------------------------------------------------
    def _iteration(self, i: int) -> Batch:
        cfg, rng = self.cfg, self.rng
        D, P, _T = self.shape
        M, W = cfg.microbatches, self.lay.world
        finite = self.free[np.isfinite(self.free)]
        self.iteration_start.append(cfg.t0_ns + int(finite.min()))
        active = [f for f in self.faults if f.active(i)]
        onset_now = [f for f in self.faults if f.onset == i]
        self._deaths(i, onset_now)

        mult = self.speed * (cfg.warmup[i] if i < len(cfg.warmup) else 1.0)
        mult = mult * np.exp(rng.normal(0.0, cfg.iteration_jitter))
        for f in active:
            if f.kind in ("slow_gpu", "slow_host"):
                mult[f.ranks] *= f.spec.slow
        n_steps = 2 * M + 1
        gc_amt = np.where(rng.random(W) < cfg.gc_rate, rng.uniform(*cfg.gc_ms, W) * 1e6, 0.0)
        gc_step = rng.integers(0, n_steps, W)
        hang_step = np.full(W, -1)
        for f in onset_now:
            if f.kind == "rank_hang":
                hang_step[f.rank] = f.step
        self.mult3, self.gc_amt3 = mult.reshape(self.shape), gc_amt.reshape(self.shape)
        self.gc_step3, self.hang3 = gc_step.reshape(self.shape), hang_step.reshape(self.shape)
        self.bw = self._bandwidth(active, i)
        ops, cons = _Acc(_OP_FIELDS), _Acc(_CONN_FIELDS)
        # past the previous iteration's host synchronisation, a CPU launches this whole
        # iteration; a rank that hangs in it stops launching there
        launch = np.where(np.isfinite(self.free) & (hang_step < 0), self.free, np.inf)
        free = self.free.reshape(self.shape).copy()

        for m in range(M):                                  # forward
            arrived: np.ndarray | None = None     # what the stage before sent this one
            for s in range(P):
                ready = free[:, s, :] if arrived is None else arrived
                end = self._stage(ops, s, m, ready, cfg.fwd_ms, i * 2 * M + m)
                if s < P - 1:
                    arrived = self._p2p(ops, cons, s, s + 1, i * M + m, end, free)
                    free[:, s, :] = arrived
                else:
                    free[:, s, :] = end
        for m in range(M):                                  # backward
            arrived = None
            for s in reversed(range(P)):
                ready = free[:, s, :] if arrived is None else arrived
                end = self._stage(ops, s, M + m, ready, cfg.bwd_ms, i * 2 * M + M + m)
                if s > 0:
                    arrived = self._p2p(ops, cons, s, s - 1, i * M + m, end, free)
                    free[:, s, :] = arrived
                else:
                    free[:, s, :] = end
        if D > 1:
            free = self._dp(ops, cons, i, free, onset_now)
        free = self._compute(slice(None), 2 * M, free, cfg.optimizer_ms)
        if cfg.checkpoint_every and (i + 1) % cfg.checkpoint_every == 0:
            free = free + cfg.checkpoint_ms * 1e6 * (1 + np.abs(rng.normal(0, 0.05, free.shape)))
        self.free = free.ravel()
        if not np.isfinite(self.free).all():
            self.stalled = True
        c = cons.columns()
        for n, (f, seen) in enumerate(zip(self.faults, self.seen)):
            if f.active(i) and len(c["conn"]):
                idx = c["conn"].astype(np.int64)
                died = self.death.get(n)
                # a transfer that ended before the component died saw it healthy
                seen[idx[c["t_end_ns"] > died] if died is not None else idx] = True
                if died is None:
                    continue
                stuck = ~np.isfinite(c["t_end_ns"]) & self.dead_mask[n][idx]
                if stuck.any():
                    self.events.setdefault(("fault", n),
                                           max(float(c["t_start_ns"][stuck].min()), died))
        if not cfg.conns:
            c = {k: v[:0] for k, v in c.items()}
        return self._finish(i, ops.columns(), c, launch)

    def _deaths(self, i: int, onset_now: list[faultmod.Fault]) -> None:
        """Pick the moment each dead fault starting now strikes: uniformly within this
        iteration (its length guessed from the previous one), so that transfers already done
        that iteration saw the component healthy and one in flight stops half-way."""
        starts = self.iteration_start
        span = starts[-1] - starts[-2] if len(starts) > 1 else 0.0
        for f in onset_now:
            if f.kind.startswith("dead_"):
                n = self.faults.index(f)
                self.death[n] = starts[-1] - self.cfg.t0_ns + float(self.drng.uniform(0, span))

    def _cut(self, conn: np.ndarray, start: np.ndarray, dur: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        """``dur`` with every transfer that crosses a component dead before it would end made
        endless, and when each such transfer stopped moving (+inf for the others)."""
        stall = np.full(np.shape(dur), np.inf)
        for n, died in self.death.items():
            hit = self.dead_mask[n][conn] & (start + dur > died)
            if hit.any():
                dur = np.where(hit, np.inf, dur)
                stall = np.where(hit, np.minimum(stall, np.maximum(start, died)), stall)
        return dur, stall

    def _bandwidth(self, active: list[faultmod.Fault], i: int) -> np.ndarray:
        # a dead component dies mid-iteration (see _cut): until then it carries traffic at full
        # rate, so it only zeroes bandwidth from the iteration after its onset
        net = [f for f in active if f.network and not (f.kind.startswith("dead_")
                                                       and f.onset == i)]
        self._congest(i)
        key = tuple(sorted(self.faults.index(f) for f in net))
        bw = self._bw_cache.get(key) if not self.congestion else None
        if bw is None:
            factor = faultmod.link_factors(self.faults, len(self.conns.link_ids), net)
            for link, _, keep in self.congestion:
                factor[link] *= keep
            bw = self.conns.bandwidth(factor)
            if not self.congestion:
                self._bw_cache[key] = bw
        return bw

    def _congest(self, i: int) -> None:
        """Start this iteration's transient congestion events and end the expired ones."""
        cfg, rng = self.cfg, self.crng
        self.congestion = [c for c in self.congestion if c[1] > i]
        if not len(self.uplinks) or cfg.congestion_rate <= 0:
            return
        for _ in range(int(rng.poisson(cfg.congestion_rate))):
            link = int(self.uplinks[rng.integers(len(self.uplinks))])
            last = i + int(rng.integers(cfg.congestion_iters[0], cfg.congestion_iters[1] + 1))
            keep = float(rng.uniform(*cfg.congestion_keep))
            self.congestion.append((link, last, keep))
            self.congestion_log.append({"link": self.conns.link_ids[link], "iterations":
                                        list(range(i, last)), "keep": round(keep, 3)})

    def _jit(self, shape: tuple[int, ...], sigma: float) -> np.ndarray:
        return np.exp(self.rng.normal(0.0, sigma, shape))

    def op_code(self, name: str) -> int:
        """The string index of an op name."""
        return OP_NAMES.index(name)

    def _stage(self, ops: _Acc, s: int, k: int, ready: np.ndarray, ms: float,
               call: int) -> np.ndarray:
        """Stage ``s``'s compute of one microbatch in one direction (step ``k``) and its
        tensor-parallel collectives: one all-reduce, or per layer (diagnosis.sim.layers)."""
        if self.cfg.layers == 1:
            return self._tp(ops, s, self._compute(s, k, ready, ms), call)
        t = ready
        for step in layermod.pass_steps(self.cfg.layers, self.cfg.tp_bytes, self.shape[2], call):
            if isinstance(step, layermod.Compute):
                t = self._compute(s, k, t, ms / step.pieces, first=step.first)
            else:
                t = self._tp(ops, s, t, step.seq, op=self.op_code(step.op), nbytes=step.nbytes,
                             size=step.size, share=1)
        return t

    def _compute(self, s: int | slice, k: int, ready: np.ndarray, ms: float,
                 first: bool = True) -> np.ndarray:
        """Compute step ``k`` (or, unless ``first``, a later piece of it, which no one-off
        pause or hang strikes) from ``ready``."""
        mult = self.mult3[:, s, :]
        dur = ms * 1e6 * mult * self._jit(mult.shape, self.cfg.jitter)
        if not first:
            return ready + dur
        dur = dur + self.gc_amt3[:, s, :] * (self.gc_step3[:, s, :] == k)
        hung = self.hang3[:, s, :] == k
        if hung.any():
            dur[hung] = np.inf
            for r, t in zip(self.ranks3[:, s, :][hung].tolist(), ready[hung].tolist()):
                self.events.setdefault(("rank", r), t)
        return ready + dur

    def _tp(self, ops: _Acc, s: int, enter: np.ndarray, seq: int, op: int = AR,
            nbytes: int | None = None, size: float | None = None, share: int = 2
            ) -> np.ndarray:
        """A tensor-parallel collective of stage ``s`` over NVLink: each rank moves ``share``
        (T-1)/T of the ``size``-byte buffer (2 for an all-reduce, 1 for an all-gather or a
        reduce-scatter) in as many ring steps; ``nbytes`` is what its rows record."""
        T = self.shape[2]
        if T == 1:
            return enter
        cfg = self.cfg
        size = cfg.tp_bytes if size is None else size
        base = (share * (T - 1) / T * size / (cfg.nvlink_gbps / 8)
                + share * (T - 1) * cfg.latency_us * 1e3)
        start = np.broadcast_to(enter.max(axis=1, keepdims=True), enter.shape)
        end = start + base * self._jit((enter.shape[0], 1), self.cfg.net_jitter)
        ops.add(enter.size, rank=self.ranks3[:, s, :], pg=self.tp_g[:, s, :], seq=seq, op=op,
                nbytes=cfg.tp_bytes if nbytes is None else nbytes, t_enter_ns=enter,
                t_start_ns=start, t_end_ns=end, status=STATUS_OK, peer=-1)
        return end

    def _p2p(self, ops: _Acc, cons: _Acc, s: int, to: int, seq: int, send_enter: np.ndarray,
             free: np.ndarray) -> np.ndarray:
        """Stage ``s`` sends to stage ``to`` (= s+1 forward, s-1 backward); returns the time the
        transfer ends (the sender's free time and the receiver's data arrival)."""
        cfg, (D, P, T) = self.cfg, self.shape
        recv_enter = free[:, to, :]
        start = np.maximum(send_enter, recv_enter)
        lo = min(s, to)
        block = self.conns.fwd0 if to > s else self.conns.bwd0
        c = block + (np.arange(D)[:, None] * (P - 1) + lo) * T + np.arange(T)[None, :]
        with np.errstate(divide="ignore"):
            dur = cfg.p2p_bytes / self.bw[c] * self._jit(c.shape, cfg.net_jitter)
        dur, _ = self._cut(c, start, dur + cfg.latency_us * 1e3)
        end = start + dur
        src, dst = self.ranks3[:, s, :], self.ranks3[:, to, :]
        pg = self.pp_g[:, s, :]
        ops.add(src.size, rank=src, pg=pg, seq=seq, op=SEND, nbytes=cfg.p2p_bytes,
                t_enter_ns=send_enter, t_start_ns=start, t_end_ns=end, status=STATUS_OK, peer=dst)
        ops.add(dst.size, rank=dst, pg=pg, seq=seq, op=RECV, nbytes=cfg.p2p_bytes,
                t_enter_ns=recv_enter, t_start_ns=start, t_end_ns=end, status=STATUS_OK, peer=src)
        # conn rows are made even without --conns: they mark what was seen (see _iteration)
        keep = self.conns.inter[c] & np.isfinite(start)
        cons.add(int(keep.sum()), conn=c[keep], bytes=cfg.p2p_bytes, t_start_ns=start[keep],
                 t_end_ns=end[keep], pg=pg[keep], seq=seq)
        return end

    def _dp(self, ops: _Acc, cons: _Acc, i: int, free: np.ndarray,
            onset_now: list[faultmod.Fault]) -> np.ndarray:
        """Every data-parallel ring all-reduces its gradients (ring over D members)."""
        cfg, (D, _P, _T) = self.cfg, self.shape
        enter = free
        start = np.broadcast_to(enter.max(axis=0, keepdims=True), enter.shape)
        per_conn = 2 * (D - 1) / D * cfg.dp_bytes
        bw = self.bw[self.conns.dp0:self.conns.dp0 + self.lay.world].reshape(self.shape)
        with np.errstate(divide="ignore"):
            dur = per_conn / bw * self._jit(bw.shape, cfg.net_jitter)
        dur = dur + 2 * (D - 1) * cfg.latency_us * 1e3
        normal = dur
        dur, stall = self._cut(self.conns.dp0 + self.ranks3, start, dur)
        failed = np.zeros(self.shape, dtype=bool)
        for f in onset_now:
            if f.kind in ("comm_hang", "error"):
                dur.reshape(-1)[f.rank] = np.inf
                stall.reshape(-1)[f.rank] = start.reshape(-1)[f.rank]
                self.events.setdefault(("rank", f.rank), float(start.reshape(-1)[f.rank]))
            if f.kind == "error":
                failed.reshape(-1)[f.rank] = True
        end = np.broadcast_to(start + dur.max(axis=0, keepdims=True), enter.shape).copy()
        status = np.where(failed, STATUS_ERROR, STATUS_OK)
        end[failed] = start[failed] + ERROR_DELAY_NS
        ops.add(enter.size, rank=self.ranks3, pg=self.dp_g, seq=i, op=AR, nbytes=cfg.dp_bytes,
                t_enter_ns=enter, t_start_ns=start, t_end_ns=end, status=status, peer=-1)
        nbytes = np.full(self.shape, per_conn)
        t_end = start + dur
        for p, t in zip(*np.nonzero(~np.isfinite(dur).all(axis=0))):
            self._stalled_ring(nbytes[:, p, t], t_end[:, p, t], dur[:, p, t], normal[:, p, t],
                               start[0, p, t], float(stall[:, p, t].min()), failed[:, p, t])
        keep = self.conns.inter[self.conns.dp0:self.conns.dp0 + self.lay.world]
        keep = keep.reshape(self.shape) & np.isfinite(start) & (nbytes > 0)
        cons.add(int(keep.sum()), conn=self.conns.dp0 + self.ranks3[keep], bytes=nbytes[keep],
                 t_start_ns=start[keep], t_end_ns=t_end[keep], pg=self.dp_g[keep], seq=i)
        out = end.copy()
        out[failed] = np.inf          # the failed rank exits
        return out

    def _stalled_ring(self, nbytes: np.ndarray, t_end: np.ndarray, dur: np.ndarray,
                      normal: np.ndarray, start: float, stall: float,
                      failed: np.ndarray) -> None:
        """A ring whose stuck connection stopped moving at ``stall``: until then every
        connection moved at its normal pace; after it, each other one forwards only the chunks
        that reach it without crossing the stuck one, then idles (its transfer completed, short
        of bytes, unless it would have finished by then anyway); the stuck one keeps its bytes
        in flight (no end). A failed rank's connections carry nothing."""
        D = len(nbytes)
        stuck = np.flatnonzero(~np.isfinite(dur))
        chunk = self.cfg.dp_bytes / D
        full = nbytes.copy()
        for j in range(D):
            if j in stuck or not np.isfinite(stall):
                continue
            k = min((j - d) % D for d in stuck)
            done = stall + k * chunk * normal[j] / full[j] if full[j] > 0 else stall
            if done < start + normal[j]:
                nbytes[j] = min(full[j], (stall - start) / normal[j] * full[j] + k * chunk)
                t_end[j] = done
        for f in np.flatnonzero(failed):
            nbytes[f] = 0
            nbytes[(f - 1) % D] = 0

    # ----- output -----------------------------------------------------------------------------
    def _finish(self, i: int, o: dict[str, np.ndarray], c: dict[str, np.ndarray],
                launch: np.ndarray) -> Batch:
        entered = np.isfinite(o["t_enter_ns"])
        launched = self._launched(o, ~entered, launch)
        o = {k: v[entered] for k, v in o.items()}
        skew = self.skew[o["rank"].astype(np.int64)]
        ops: dict[str, np.ndarray] = {
            "rank": o["rank"].astype("<i4"),
            "pg": o["pg"].astype("<u4"),
            "seq": o["seq"].astype("<i8"),
            "op": o["op"].astype("<u4"),
            "nbytes": o["nbytes"].astype("<i8"),
            "dtype": np.zeros(len(skew), "<u4"),
        }
        for name in ("t_enter_ns", "t_start_ns", "t_end_ns"):
            ops[name] = self._abs(o[name], skew)
        ops["status"] = o["status"].astype("u1")
        ops["peer"] = o["peer"].astype("<i4")
        order = np.argsort(ops["t_enter_ns"], kind="stable")
        ops = {k: v[order] for k, v in ops.items()}
        conn_idx = c["conn"].astype(np.int64)
        cskew = self.skew[self.conns.src[conn_idx]] if len(conn_idx) else np.empty(0, np.int64)
        conns = {
            "conn": conn_idx,
            "bytes": np.round(c["bytes"]).astype(np.int64),
            "t_start_ns": self._abs(c["t_start_ns"], cskew),
            "t_end_ns": self._abs(c["t_end_ns"], cskew),
            "pg": c["pg"].astype(np.int64),
            "seq": c["seq"].astype(np.int64),
        }
        order = np.argsort(conns["t_start_ns"], kind="stable")
        conns = {k: v[order] for k, v in conns.items()}
        return Batch(i, ops, conns, launched)

    def _launched(self, o: dict[str, np.ndarray], waiting: np.ndarray, launch: np.ndarray
                  ) -> dict[str, np.ndarray]:
        """The rows of calls never entered whose rank's CPU launched them (``launch``: when
        each rank's CPU began the iteration, +inf where it did not), in program order (the
        order the iteration added them: per rank, the order it makes its calls)."""
        rank = o["rank"].astype(np.int64)
        sel = waiting & np.isfinite(launch[rank])
        r = rank[sel]
        return {"rank": r.astype("<i4"), "pg": o["pg"][sel].astype("<u4"),
                "op": o["op"][sel].astype("<u4"), "peer": o["peer"][sel].astype("<i4"),
                "t_launch_ns": self.cfg.t0_ns + np.round(launch[r]).astype(np.int64)
                + self.skew[r]}

    def _abs(self, t: np.ndarray, skew: np.ndarray) -> np.ndarray:
        t = t.astype(np.float64)
        ok = np.isfinite(t)
        if ok.any():
            self.last = max(self.last, float(t[ok].max()))
        out = np.full(len(t), -1, dtype=np.int64)
        out[ok] = self.cfg.t0_ns + np.round(t[ok]).astype(np.int64) + skew[ok]
        return out
