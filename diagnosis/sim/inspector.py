"""Writes a simulation as NCCL's Inspector would: ``<dir>/<hostname>-pid<pid>.log``, one file
per process, one JSON line per completed operation per communicator (shared fixtures
``nccl/FORMATS.md`` section 1a).

What the plugin does, the writer does: a dump thread per process wakes every dump interval
(each process at its own phase) and writes the operations that completed since, communicator
by communicator, collectives then point-to-point operations, each line with the same
``header`` and ``metadata`` and a ``dump_timestamp_us`` of when it was written; ``coll_sn`` is
NCCL's per-type counter, ``p2p_sn`` the per-communicator one (1-based, both directions);
``coll_exec_time_us`` the kernel's time on the GPU, which starts when the rank arrives (an
early rank's kernel waits for the others); bandwidths as NCCL computes them (``"nan"`` for an
execution time of 0). Operations that fail or never finish are not written, nor those that
complete after a process's last dump (nothing is dumped at exit). With ``verbose`` the
``event_trace_sn``/``event_trace_ts`` objects are written too.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from diagnosis.nccl.ids import inspector_id, msg_from_bytes, nccl_func
from diagnosis.sim.model import Simulation
from diagnosis.sim.nccl_ids import comm_hash, pid_of

log = logging.getLogger(__name__)

__all__ = ["InspectorWriter"]

_HEAD = ('{"header":{"id":"%s","comm_name":"%s","rank":%d,"n_ranks":%d,"nnodes":%d},'
         '"metadata":{"inspector_output_format_version":"v4.0","git_rev":"",'
         '"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":%d,"hostname":"%s",'
         '"pid":%d},')
_COLL = ('"coll_perf":{"coll":"%s","coll_sn":%d,"coll_msg_size_bytes":%d,'
         '"coll_exec_time_us":%d,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":%s,'
         '"coll_busbw_gbs":%s%s}}\n')
_P2P = ('"p2p_perf":{"p2p":"%s","p2p_sn":%d,"p2p_peer":%d,"p2p_msg_size_bytes":%d,'
        '"p2p_exec_time_us":%d,"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":%s,'
        '"p2p_busbw_gbs":%s%s}}\n')
_VERBOSE = (',"event_trace_sn":{"%s_start_sn":1,"%s_stop_sn":2,"kernel_events":[{"channel_id":0,'
            '"kernel_start_sn":3,"kernel_stop_sn":5,"kernel_record_sn":4}]},'
            '"event_trace_ts":{"%s_start_ts":%d,"%s_stop_ts":%d,"kernel_events":[{"channel_id":0,'
            '"kernel_start_ts":%d,"kernel_stop_ts":%d,"kernel_record_ts":%d}]}')
_ENQUEUE_LEAD_US = 15       # the CPU enqueues a call this long before its kernel starts
_FLUSH_BYTES = 64 << 20


class InspectorWriter:
    """Feed it the simulation's op rows in completion order with :meth:`rows` (and the time
    up to which no earlier row is still to come), then :meth:`end`."""

    def __init__(self, sim: Simulation, out_dir: str | Path, *, dump_interval_us: int = 100_000,
                 verbose: bool = True) -> None:
        self.sim = sim
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.verbose = verbose
        self.interval = int(dump_interval_us)
        lay = sim.lay
        world = lay.world
        rng = np.random.default_rng([sim.cfg.seed, 17])
        self.phase = rng.integers(0, self.interval, world).astype(np.int64)
        self.host = [lay.hosts[h] for h in lay.host_of.tolist()]
        self.pid = [pid_of(r) for r in range(world)]
        self.files = [self.dir / f"{self.host[r]}-pid{self.pid[r]}.log" for r in range(world)]
        # per communicator (string index in sim.strings): hash, size, nodes; per rank its rank
        self.pg_hash: dict[int, str] = {}
        self.pg_size: dict[int, int] = {}
        self.pg_nodes: dict[int, int] = {}
        self.comm_rank: dict[tuple[int, int], int] = {}
        index = {name: i for i, name in enumerate(sim.strings)}
        for name, ranks in lay.groups:
            g = index[name]
            # the Inspector prints the hash as "0x%lx" into 17 bytes: its first 14 hex digits
            self.pg_hash[g] = f"0x{inspector_id(comm_hash(sim.cfg.job, sim.cfg.seed, name)):x}"
            self.pg_size[g] = len(ranks)
            self.pg_nodes[g] = len({int(lay.host_of[r]) for r in ranks})
            for i, r in enumerate(ranks):
                self.comm_rank[(g, r)] = i
        self.counters: dict[tuple[int, int, int], int] = {}
        self.p2p_counters: dict[tuple[int, int], int] = {}
        self.exit_ns: dict[int, int] = {}
        self._pending: list[dict[str, np.ndarray]] = []
        self._buf: dict[int, list[str]] = {}
        self._buffered = 0
        self.n_lines = 0
        self.n_lost = 0

    # ----- rows in ----------------------------------------------------------------------------
    def rows(self, ops: dict[str, np.ndarray], upto_ns: int) -> None:
        """Op rows released in completion order, and the time up to which every row is known."""
        if ops and len(ops["rank"]):
            self._pending.append(self._numbered(ops))
        self._write_upto(upto_ns)

    def end(self, end_ns: int) -> None:
        """Recording stopped at ``end_ns``: the dumps up to then are written (a process that
        exited made none after it); what completed after a process's last dump is lost."""
        self._write_upto(end_ns, final=True)
        self._flush()

    # ----- numbering ------------------------------------------------------------------------
    def _numbered(self, o: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """NCCL's numbers for the rows, counted per rank in completion order (on one
        communicator calls complete in order): ``coll_sn`` per (rank, communicator, type) from
        0, ``p2p_sn`` per (rank, communicator) from 1."""
        n = len(o["rank"])
        rank, pg, op = (o[k].astype(np.int64) for k in ("rank", "pg", "op"))
        p2p = o["peer"] >= 0
        sn = np.empty(n, dtype=np.int64)
        for i, (r, g, k, is_p2p) in enumerate(zip(rank.tolist(), pg.tolist(), op.tolist(),
                                                  p2p.tolist())):
            if is_p2p:
                c = self.p2p_counters.get((r, g), 0) + 1
                self.p2p_counters[(r, g)] = c
                sn[i] = c
            else:
                key = (r, g, k)
                c = self.counters.get(key, -1) + 1
                self.counters[key] = c
                sn[i] = c
        failed = (o["status"] > 0) & (o["t_end_ns"] >= 0)
        for r, t in zip(rank[failed].tolist(), o["t_end_ns"][failed].tolist()):
            self.exit_ns.setdefault(r, t)        # the rank's process exits on its failure
        done = (o["t_end_ns"] >= 0) & (o["status"] == 0)
        out = {k: v[done] for k, v in o.items()}
        out["sn"] = sn[done]
        t_end_us = out["t_end_ns"] // 1000
        ph = self.phase[out["rank"].astype(np.int64)]
        out["tick_us"] = ph + -((ph - t_end_us) // self.interval) * self.interval
        return out

    # ----- dumps -------------------------------------------------------------------------------
    def _write_upto(self, upto_ns: int, final: bool = False) -> None:
        if not self._pending:
            return
        cols = {k: np.concatenate([p[k] for p in self._pending]) for k in self._pending[0]}
        due = cols["tick_us"] * 1000 <= upto_ns
        if final:
            exit_at = np.asarray([self.exit_ns.get(int(r), upto_ns)
                                  for r in cols["rank"].tolist()], dtype=np.int64)
            lost = ~due | (cols["tick_us"] * 1000 > exit_at)
            self.n_lost += int(lost.sum())
            due &= ~lost
        rest = {k: v[~due] for k, v in cols.items()}
        self._pending = [] if final or not len(rest["rank"]) else [rest]
        if due.any():
            self._format({k: v[due] for k, v in cols.items()})
        if self._buffered > _FLUSH_BYTES:
            self._flush()

    def _format(self, c: dict[str, np.ndarray]) -> None:
        sim = self.sim
        strings = sim.strings
        p2p = c["peer"] >= 0
        # a dump writes each communicator's collectives, then its point-to-point operations
        order = np.lexsort((c["t_end_ns"], p2p, c["pg"], c["tick_us"], c["rank"]))
        keys = np.stack([c["rank"][order], c["tick_us"][order]])
        head = np.r_[True, (keys[:, 1:] != keys[:, :-1]).any(axis=0)]
        starts = np.maximum.accumulate(np.where(head, np.arange(len(order)), 0))
        line_in_dump = np.arange(len(order)) - starts
        for j, i in enumerate(order.tolist()):
            r = int(c["rank"][i])
            g = int(c["pg"][i])
            op = strings[int(c["op"][i])]
            n = self.pg_size[g]
            start_us = int(c["t_enter_ns"][i]) // 1000
            stop_us = int(c["t_end_ns"][i]) // 1000
            exe = max(stop_us - start_us, 0)
            msg = msg_from_bytes(op, int(c["nbytes"][i]), n)
            algbw, busbw = _bandwidth(op, msg, n, exe)
            dump = int(c["tick_us"][i]) + int(line_in_dump[j])
            head_txt = _HEAD % (self.pg_hash[g], strings[g], self.comm_rank[(g, r)], n,
                                self.pg_nodes[g], dump, self.host[r], self.pid[r])
            kind = "p2p" if p2p[i] else "coll"
            verbose = _VERBOSE % (kind, kind, kind, start_us - _ENQUEUE_LEAD_US, kind,
                                  start_us - _ENQUEUE_LEAD_US + 3, start_us, stop_us,
                                  stop_us) if self.verbose else ""
            if p2p[i]:
                body = _P2P % (nccl_func(op), int(c["sn"][i]),
                               self.comm_rank[(g, int(c["peer"][i]))], msg, exe, algbw, busbw,
                               verbose)
            else:
                body = _COLL % (nccl_func(op), int(c["sn"][i]), msg, exe, algbw, busbw,
                                verbose)
            line = head_txt + body
            self._buf.setdefault(r, []).append(line)
            self._buffered += len(line)
        self.n_lines += len(order)

    def _flush(self) -> None:
        for r, lines in self._buf.items():
            with open(self.files[r], "a", encoding="utf-8") as fh:
                fh.write("".join(lines))
        self._buf = {}
        self._buffered = 0


def _bandwidth(op: str, msg: int, n: int, exec_us: int) -> tuple[str, str]:
    """As the plugin computes them (GB/s, ``%lf``), ``"nan"`` for a zero execution time."""
    if exec_us <= 0:
        return '"nan"', '"nan"'
    traffic = msg * n if op in ("all_gather", "reduce_scatter") else msg
    algbw = traffic / 1e9 / (exec_us / 1e6)
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n \
        if op in ("all_gather", "reduce_scatter") else 1.0
    return f"{algbw:.6f}", f"{algbw * factor:.6f}"
