"""The reduced stream of a large job, as its nodes' sidecars would ship it, built with numpy.

Shape (per rank, ``per_node`` ranks a node): a tensor-parallel group of its node (``tp<n>``,
``tp_rate`` calls/s), a data-parallel group of every node's rank with the same local index
(``dp<l>``, ``dp_rate``), and pipeline send/recv to the same local rank of the next and previous
node (``pp<l>``, ``pp_rate`` per direction): 300 + 50 + 2 x 25 = 400 calls/s by default. Per
second the stream holds what a sidecar ships in reduced mode:

- op rows of the sampled calls only (the crc32 rule at each communicator's factor, exact and
  vectorised: ``c4.proto.sampling.sampled_after``), every member's row of each;
- at each window's end (plus the sidecar's watermark lag), ``progress`` per rank and
  communicator (per direction and peer for send/recv) and ``linkstat`` per socket: both ends of
  each ring connection (tp intra-node with the peer named, dp and pp across nodes keyed by
  endpoints for the daemon to pair), busy 3% more or less than usual at random;
- the collectors' counters (``CollectorColumns``: calls recorded, a heartbeat) every second;
- a port record per node at the start and every 30 s.

The generator follows the daemon's schedule (the default factor, per-communicator steps from
seq S, windows), as the sidecars do. A planted hang: from ``t`` on one rank stops (no rows, no
progress, no heartbeat), the other members of its tp group wait inside their next tp call (one
open row each, then one progress record), and the rest of the job stalls behind it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import (
    LINKSTAT_COLUMNS,
    OP_COLUMNS,
    PORT_COLUMNS,
    PROGRESS_COLUMNS,
    Columns,
    encode_collectors,
    encode_linkstats,
    encode_ops,
    encode_ports,
    encode_progress,
)
from c4.proto.sampling import prefix_state, sampled_after
from c4.topology.builders import host_name

NS = 1_000_000_000
NEVER = np.iinfo(np.int64).max
OPS = ["all_reduce", "send", "recv", "bfloat16"]


@dataclass(frozen=True)
class JobShape:
    ranks: int
    per_node: int = 8
    tp_rate: float = 300.0
    dp_rate: float = 50.0
    pp_rate: float = 25.0
    streams: int = 16
    job: str = "scale"
    lag_s: float = 0.8          # the sidecars' watermark lag behind a window's end

    @property
    def nodes(self) -> int:
        return self.ranks // self.per_node

    @property
    def calls_per_rank(self) -> float:
        return self.tp_rate + self.dp_rate + 2 * self.pp_rate


class Sampling:
    """Each communicator's factor by seq: a default, and at most one step (from, factor)."""

    def __init__(self, names: list[str]) -> None:
        self.index = {n: i for i, n in enumerate(names)}
        self.states = np.array([prefix_state(n) for n in names], dtype=np.uint32)
        self.base = np.ones(len(names), dtype=np.int64)
        self.start = np.full(len(names), NEVER, dtype=np.int64)
        self.after = np.ones(len(names), dtype=np.int64)
        self.version = 0
        self.window_ns = 0
        self.window_from_ns = 0

    def apply(self, msg: c4_pb2.SampleSchedule) -> bool:
        if msg.version <= self.version:
            return False
        self.version = msg.version
        default = max(1, int(msg.default_sample))
        self.base[:] = default
        self.start[:] = NEVER
        self.after[:] = default
        steps: dict[str, list[tuple[int, int]]] = {}
        for s in msg.steps:
            steps.setdefault(s.pg, []).append((int(s.from_seq), int(s.sample)))
        for pg, v in steps.items():
            i = self.index.get(pg)
            if i is None:
                continue
            v.sort()
            if len(v) > 1:
                self.base[i] = v[-2][1]
            self.start[i], self.after[i] = v[-1]
            if len(v) == 1 and v[0][0] <= 0:
                self.base[i] = v[0][1]
        self.window_ns, self.window_from_ns = int(msg.window_ns), int(msg.window_from_ns)
        return True

    def kept(self, pg: np.ndarray, seq: np.ndarray) -> np.ndarray:
        k = np.where(seq >= self.start[pg], self.after[pg], self.base[pg])
        out = np.ones(len(seq), dtype=bool)
        for kk in np.unique(k[k > 1]).tolist():
            m = k == kk
            out[m] = sampled_after(self.states[pg[m]], seq[m], kk)
        return out

    @property
    def sample(self) -> int:
        return int(max(self.base.max(), self.after.max()))


@dataclass
class Fault:
    rank: int
    t_ns: int
    seqs: dict[str, int]       # the calls the stopped rank had completed per communicator


class JobGen:
    """Batches per stream (a stream stands for the sidecars of ``nodes / streams`` nodes)."""

    def __init__(self, shape: JobShape, t0_ns: int) -> None:
        self.shape = shape
        self.t0 = t0_ns
        n, p = shape.nodes, shape.per_node
        self.pgs = [f"tp{i}" for i in range(n)] + [f"dp{j}" for j in range(p)] + \
            [f"pp{j}" for j in range(p)]
        self.sampling = Sampling(self.pgs)
        self.strings = self.pgs + OPS
        self._tp0, self._dp0, self._pp0 = 0, n, n + p
        self.fault: Fault | None = None
        self._progress = [self._progress_keys(i) for i in range(shape.streams)]
        self._links = [self._link_keys(i) for i in range(shape.streams)]
        self._last_progress = [np.full(len(k["rank"]), -2, np.int64) for k in self._progress]
        self.sent_ops = 0
        self.sent_records = 0
        self._rng = np.random.default_rng(0)

    # -- layout ------------------------------------------------------------------------------
    def stream_of(self, rank: np.ndarray) -> np.ndarray:
        return (np.asarray(rank) // self.shape.per_node) % self.shape.streams

    def ranks_of(self, stream: int) -> np.ndarray:
        r = np.arange(self.shape.ranks)
        return r[self.stream_of(r) == stream]

    def groups(self) -> list[c4_pb2.GroupInfo]:
        s, n, p = self.shape, self.shape.nodes, self.shape.per_node
        out = [c4_pb2.GroupInfo(job=s.job, pg=f"tp{i}", ranks=list(range(i * p, (i + 1) * p)))
               for i in range(n)]
        for name in ("dp", "pp"):
            out += [c4_pb2.GroupInfo(job=s.job, pg=f"{name}{j}",
                                     ranks=list(range(j, s.ranks, p))) for j in range(p)]
        return out

    def host(self, node: int) -> str:
        """Node ``node``'s host id, as the topology builders name it (``--fabric``)."""
        return host_name(node, self.shape.nodes)

    def rank_infos(self, stream: int) -> list[c4_pb2.RankInfo]:
        """Each rank on its node's GPU of its local rank, and the NIC of that GPU's rail."""
        s = self.shape
        out = []
        for r in self.ranks_of(stream).tolist():
            h, loc = self.host(r // s.per_node), r % s.per_node
            out.append(c4_pb2.RankInfo(job=s.job, rank=int(r), world_size=s.ranks, host=h,
                                       local_rank=int(loc), nic=f"{h}/nic{loc}",
                                       gpu=f"{h}/gpu{loc}", backend="nccl", t_ns=self.t0))
        return out

    # -- seqs --------------------------------------------------------------------------------
    def _seq_at(self, rate: float, t_ns: int) -> int:
        """Calls of a communicator entered before ``t_ns`` (the next seq)."""
        return max(0, math.floor((t_ns - self.t0) * rate / NS))

    def _frozen(self, t_ns: int) -> int:
        return min(t_ns, self.fault.t_ns) if self.fault is not None else t_ns

    # -- op rows -----------------------------------------------------------------------------
    def ops(self, lo_ns: int, hi_ns: int) -> list[Columns]:
        """The sampled op rows of the calls entered in [lo, hi), per stream."""
        s = self.shape
        lo, hi = self._frozen(lo_ns), self._frozen(hi_ns)
        parts = []
        p, n = s.per_node, s.nodes
        # tp: every node's group, the same seqs
        a, b = self._seq_at(s.tp_rate, lo), self._seq_at(s.tp_rate, hi)
        if b > a:
            seq = np.tile(np.arange(a, b, dtype=np.int64), n)
            node = np.repeat(np.arange(n, dtype=np.int64), b - a)
            keep = self.sampling.kept(self._tp0 + node, seq)
            seq, node = seq[keep], node[keep]
            rank = (node[:, None] * p + np.arange(p)[None, :]).ravel()
            parts.append(self._rows(rank, np.repeat(self._tp0 + node, p), np.repeat(seq, p),
                                    0, -1, s.tp_rate))
        # dp: the same seqs on 8 groups of every node's rank
        a, b = self._seq_at(s.dp_rate, lo), self._seq_at(s.dp_rate, hi)
        if b > a:
            seq = np.tile(np.arange(a, b, dtype=np.int64), p)
            loc = np.repeat(np.arange(p, dtype=np.int64), b - a)
            keep = self.sampling.kept(self._dp0 + loc, seq)
            seq, loc = seq[keep], loc[keep]
            rank = (loc[:, None] + p * np.arange(n)[None, :]).ravel()
            parts.append(self._rows(rank, np.repeat(self._dp0 + loc, n), np.repeat(seq, n),
                                    0, -1, s.dp_rate))
        # pp: per pair (node i -> i + 1) the same per-pair seqs; a send and its recv
        a, b = self._seq_at(s.pp_rate, lo), self._seq_at(s.pp_rate, hi)
        if b > a and n > 1:
            seq = np.tile(np.arange(a, b, dtype=np.int64), p)
            loc = np.repeat(np.arange(p, dtype=np.int64), b - a)
            keep = self.sampling.kept(self._pp0 + loc, seq)
            seq, loc = seq[keep], loc[keep]
            src = (loc[:, None] + p * np.arange(n - 1)[None, :]).ravel()
            pg, sq = np.repeat(self._pp0 + loc, n - 1), np.repeat(seq, n - 1)
            parts.append(self._rows(src, pg, sq, 1, src + p, s.pp_rate))
            parts.append(self._rows(src + p, pg, sq, 2, src, s.pp_rate))
        if self.fault is not None and lo_ns <= self.fault.t_ns < hi_ns:
            parts.append(self._stuck_rows())
        if not parts:
            return [None] * s.streams
        cols = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
        if self.fault is not None:     # the stopped rank makes no call from its stop on
            live = (cols["rank"] != self.fault.rank) | (cols["t_enter_ns"] < self.fault.t_ns)
            cols = {k: v[live] for k, v in cols.items()}
        return self._split(cols)

    def _rows(self, rank: np.ndarray, pg: np.ndarray, seq: np.ndarray, op: int,
              peer: np.ndarray | int, rate: float) -> dict[str, np.ndarray]:
        m = len(rank)
        enter = self.t0 + (seq * NS / rate).astype(np.int64) + (rank % 64) * 1000
        return {"rank": rank.astype(np.int32), "pg": pg.astype(np.uint32), "seq": seq,
                "op": np.full(m, len(self.pgs) + op, np.uint32),
                "nbytes": np.full(m, 1 << 20, np.int64),
                "dtype": np.full(m, len(self.pgs) + 3, np.uint32), "t_enter_ns": enter,
                "t_start_ns": enter + 20_000, "t_end_ns": enter + 500_000,
                "status": np.zeros(m, np.uint8),
                "peer": np.broadcast_to(np.asarray(peer, dtype=np.int32), (m,)).copy()}

    def _stuck_rows(self) -> dict[str, np.ndarray]:
        """The stopped rank's tp peers, inside the call it never entered (open rows)."""
        f = self.fault
        assert f is not None
        p = self.shape.per_node
        node = f.rank // p
        peers = np.array([node * p + j for j in range(p) if node * p + j != f.rank])
        seq = np.full(len(peers), f.seqs["tp"] + 1, np.int64)
        rows = self._rows(peers, np.full(len(peers), self._tp0 + node), seq, 0, -1,
                          self.shape.tp_rate)
        rows["t_end_ns"] = np.full(len(peers), -1, np.int64)
        return rows

    def _split(self, cols: dict[str, np.ndarray]) -> list[Columns | None]:
        """Per stream, with a string table of the strings its rows use."""
        out: list[Columns | None] = []
        stream = self.stream_of(cols["rank"])
        order = np.argsort(stream, kind="stable")
        bounds = np.searchsorted(stream[order], np.arange(self.shape.streams + 1))
        for i in range(self.shape.streams):
            rows = order[bounds[i]:bounds[i + 1]]
            if not len(rows):
                out.append(None)
                continue
            part = {k: v[rows] for k, v in cols.items()}
            used = np.unique(np.concatenate([part["pg"], part["op"], part["dtype"]]))
            remap = np.zeros(len(self.strings), np.uint32)
            remap[used] = np.arange(len(used), dtype=np.uint32)
            for k in ("pg", "op", "dtype"):
                part[k] = remap[part[k]]
            out.append(Columns({k: part[k] for k in OP_COLUMNS},
                               [self.strings[j] for j in used.tolist()]))
        return out

    # -- progress ----------------------------------------------------------------------------
    def _progress_keys(self, stream: int) -> dict[str, np.ndarray]:
        s, p, n = self.shape, self.shape.per_node, self.shape.nodes
        r = self.ranks_of(stream)
        node, loc = r // p, r % p
        keys = [(r, self._tp0 + node, -1, -1, s.tp_rate),
                (r, self._dp0 + loc, -1, -1, s.dp_rate)]
        fwd = node < n - 1
        keys.append((r[fwd], self._pp0 + loc[fwd], 1, r[fwd] + p, s.pp_rate))
        back = node > 0
        keys.append((r[back], self._pp0 + loc[back], 2, r[back] - p, s.pp_rate))
        out: dict[str, list[np.ndarray]] = {k: [] for k in ("rank", "pg", "op", "peer", "rate")}
        for rank, pg, op, peer, rate in keys:
            m = len(rank)
            out["rank"].append(rank)
            out["pg"].append(np.asarray(pg))
            out["op"].append(np.full(m, -1 if op < 0 else len(self.pgs) + op))
            out["peer"].append(np.broadcast_to(np.asarray(peer), (m,)))
            out["rate"].append(np.full(m, rate))
        return {k: np.concatenate(v) for k, v in out.items()}

    def progress(self, stream: int, t_ns: int) -> Columns | None:
        """The progress records of the window ending at ``t_ns`` (those that changed)."""
        keys = self._progress[stream]
        t = self._frozen(t_ns)
        entered = np.floor((t - self.t0) * keys["rate"] / NS).astype(np.int64) - 1
        completed = entered.copy()
        f = self.fault
        if f is not None and t_ns > f.t_ns:
            p = self.shape.per_node
            tp_peer = (keys["rank"] // p == f.rank // p) & (keys["rank"] != f.rank) & \
                (keys["pg"] == self._tp0 + f.rank // p)
            entered = np.where(tp_peer, entered + 1, entered)
            live = keys["rank"] != f.rank
        else:
            live = np.ones(len(entered), dtype=bool)
        last = self._last_progress[stream]
        changed = live & (entered != last)
        if not changed.any():
            return None
        last[changed] = entered[changed]
        m = int(changed.sum())
        rows = {"rank": keys["rank"][changed], "pg": keys["pg"][changed],
                "op": keys["op"][changed], "peer": keys["peer"][changed],
                "t_ns": np.full(m, t_ns, np.int64), "entered": entered[changed],
                "completed": completed[changed]}
        return Columns({k: np.asarray(rows[k]) for k in PROGRESS_COLUMNS}, self.strings)

    # -- linkstat ----------------------------------------------------------------------------
    def _link_keys(self, stream: int) -> tuple[dict[str, np.ndarray], list[str]]:
        """Both ends of each ring connection the stream's ranks hold: tp (next and previous on
        the node, the peer named), dp and pp (next and previous node, endpoints only)."""
        p, n = self.shape.per_node, self.shape.nodes
        r = self.ranks_of(stream)
        node, loc = r // p, r % p
        table: dict[str, int] = {}

        def ep(owner: np.ndarray, other: np.ndarray, kind: int) -> list[int]:
            return [table.setdefault(f"10.{(o // p) >> 8 & 255}.{(o // p) & 255}.{o % p}:"
                                     f"{20000 + kind * 8192 + (x % 8192)}", len(table))
                    for o, x in zip(owner.tolist(), other.tolist())]

        out: dict[str, list] = {k: [] for k in ("src", "dst", "local", "remote", "rate")}
        tp_next = node * p + (loc + 1) % p
        tp_prev = node * p + (loc - 1) % p
        dp_next, dp_prev = (r + p) % (n * p), (r - p) % (n * p)
        conns = [(tp_next, tp_next, 0, self.shape.tp_rate),
                 (tp_prev, tp_prev, 0, self.shape.tp_rate),
                 (dp_next, np.full(len(r), -1), 1, self.shape.dp_rate),
                 (dp_prev, np.full(len(r), -1), 1, self.shape.dp_rate)]
        fwd, back = node < n - 1, node > 0
        conns.append((np.where(fwd, r + p, r), np.full(len(r), -1), 2, self.shape.pp_rate))
        conns.append((np.where(back, r - p, r), np.full(len(r), -1), 2, self.shape.pp_rate))
        for i, (peer, dst, kind, rate) in enumerate(conns):
            ok = peer != r
            if i >= 4:
                ok &= fwd if i == 4 else back
            out["src"].append(r[ok])
            out["dst"].append(dst[ok])
            out["local"].append(ep(r[ok], peer[ok], kind))
            out["remote"].append(ep(peer[ok], r[ok], kind))
            out["rate"].append(np.full(int(ok.sum()), rate))
        # typed: a node with no next stage has empty lists, which numpy would make floats
        keys = {k: np.concatenate([np.asarray(x, np.float64 if k == "rate" else np.int64)
                                   for x in v]) for k, v in out.items()}
        return keys, list(table)

    def linkstat(self, stream: int, t_ns: int, window_ns: int) -> Columns | None:
        if self.fault is not None and t_ns - window_ns >= self.fault.t_ns:
            return None    # the job stalled: nothing moves
        keys, strings = self._links[stream]
        m = len(keys["src"])
        transfers = np.maximum(np.round(keys["rate"] * window_ns / NS), 1).astype(np.int64)
        rows = {"src": keys["src"], "dst": keys["dst"], "local": keys["local"],
                "remote": keys["remote"], "pg": np.full(m, -1), "t_ns": np.full(m, t_ns),
                "window_ns": np.full(m, window_ns), "transfers": transfers,
                "bytes": transfers << 20, "busy_ns": self._busy_ns(transfers),
                "max_ns": np.full(m, 300_000), "open": np.zeros(m, np.int64),
                "open_since_ns": np.full(m, -1), "retrans": np.zeros(m, np.int64)}
        if self.fault is not None:
            live = (keys["src"] != self.fault.rank)
            rows = {k: v[live] for k, v in rows.items()}
        return Columns({k: np.asarray(rows[k]) for k in LINKSTAT_COLUMNS}, strings)

    def _busy_ns(self, transfers: np.ndarray) -> np.ndarray:
        """A window's busy time: 200 us per 1 MiB transfer, give or take 3% (a window's mean
        of many transfers; the detectors judge every connection against the noise, and a
        noiseless series would leave all but the faulty ones unread)."""
        jitter = np.exp(self._rng.normal(0.0, 0.03, len(transfers)))
        return np.round(transfers * 200_000 * jitter).astype(np.int64)

    # -- ports and counters ------------------------------------------------------------------
    def ports(self, stream: int, t_ns: int) -> Columns:
        nodes = np.unique(self.ranks_of(stream) // self.shape.per_node)
        hosts = [self.host(x) for x in nodes.tolist()]
        nics = [f"{h}/nic{i}" for h in hosts for i in range(self.shape.per_node)]
        m = len(nics)
        strings = hosts + nics
        c = {"host": np.repeat(np.arange(len(hosts)), self.shape.per_node),
             "nic": np.arange(len(hosts), len(hosts) + m), "t_ns": np.full(m, t_ns),
             "up": np.ones(m, np.uint8)}
        for k in PORT_COLUMNS:
            c.setdefault(k, np.zeros(m, np.int64))
        return Columns({k: np.asarray(c[k], dtype=PORT_COLUMNS[k]) for k in PORT_COLUMNS},
                       strings)

    def stats(self, stream: int, t_ns: int) -> c4_pb2.SidecarStats:
        """Every collector's counters (calls recorded so far, and a heartbeat), as the sidecars
        send them (columns per job); a stopped rank has gone silent."""
        s = self.shape
        ranks = self.ranks_of(stream)
        if self.fault is not None:
            ranks = ranks[ranks != self.fault.rank]
        m = len(ranks)
        recorded = int((self._frozen(t_ns) - self.t0) * s.calls_per_rank / NS)
        zeros = np.zeros(m, np.int64)
        cols = Columns({"rank": ranks, "recorded": np.full(m, recorded), "dropped": zeros,
                        "shipped": zeros, "t_ns": np.full(m, t_ns), "leaving": zeros})
        return c4_pb2.SidecarStats(host=f"gen{stream}",
                                   collector_columns=[encode_collectors(s.job, cols)])

    # -- the fault ---------------------------------------------------------------------------
    def plant(self, rank: int, t_ns: int) -> Fault:
        s = self.shape
        self.fault = Fault(rank, t_ns, {"tp": self._seq_at(s.tp_rate, t_ns) - 1})
        return self.fault


def encode(kind: str, job: str, cols: Columns) -> object:
    return {"ops": encode_ops, "progress": encode_progress, "linkstats": encode_linkstats,
            "ports": encode_ports}[kind](job, cols)
