"""Writes ``ncclras -f json`` status reports of a simulation, as a poller taking one every
``every_s`` seconds would have got them once the job stopped moving (and one when recording
stopped): per communicator every rank's process, node address, GPU and per-type launch counts
(``collective_counts``: calls launched, whether or not they finished), and the ranks whose
process is gone (``missing_ranks``: unresponsive, considered dead after RAS's 60 s).

RAS counts what the CPU launched, not what the GPU reached (recorded on an H100 with NCCL
2.28.9: three ranks showed 200 AllReduces while their GPUs waited in the 100th). A stuck
rank's CPU goes on launching until something makes it wait for its GPU: the simulation's CPUs
run to the end of the iteration (``Batch.launched``); ``run_ahead`` caps that at a number of
calls past the one the GPU waits in (a job that synchronises more often, or a launch queue
that fills).

The reports go one after the other into one file, as ``while sleep 10; do ncclras -f json;
done`` would leave them; ``timestamp`` is local time to the second, as ncclras prints it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from diagnosis.nccl.ids import RAS_COLLECTIVES, nccl_func
from diagnosis.sim.model import OP_NAMES, Simulation
from diagnosis.sim.nccl_ids import address_of, comm_hash, local_index, pid_of

__all__ = ["RasWriter"]

DEAD_AFTER_NS = 60_000_000_000      # RAS declares an unreachable peer dead after 60 s


class RasWriter:
    """Feed it every op row (:meth:`rows`, any order); :meth:`end` writes the reports."""

    def __init__(self, sim: Simulation, path: str | Path, every_s: float = 10.0,
                 run_ahead: int | None = None) -> None:
        self.sim = sim
        self.path = Path(path)
        self.every_ns = int(every_s * 1e9)
        self.run_ahead = run_ahead
        self.counts: Counter = Counter()
        self.exit_ns: dict[int, int] = {}
        self.n_reports = 0

    def rows(self, ops: dict[str, np.ndarray]) -> None:
        if not ops or not len(ops["rank"]):
            return
        self._count(ops, ops["peer"] < 0)
        failed = (ops["status"] > 0) & (ops["t_end_ns"] >= 0)
        for r, t in zip(ops["rank"][failed].tolist(), ops["t_end_ns"][failed].tolist()):
            self.exit_ns.setdefault(int(r), int(t))

    def launched(self, rows: dict[str, np.ndarray]) -> None:
        """Calls launched that the GPU never entered, in each rank's program order (its GPU
        waits in the call before the first of them): with ``run_ahead``, only that many of
        each rank's count, sends and receives included (RAS counts only the collectives)."""
        if not rows or not len(rows["rank"]):
            return
        keep = rows["peer"] < 0
        if self.run_ahead is not None:
            rank = rows["rank"].astype(np.int64)
            order = np.argsort(rank, kind="stable")
            r = rank[order]
            head = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
            nth = np.empty(len(r), dtype=np.int64)
            nth[order] = np.arange(len(r)) - np.repeat(head, np.diff(np.r_[head, len(r)]))
            keep &= nth < self.run_ahead
        self._count(rows, keep)

    def _count(self, ops: dict[str, np.ndarray], sel: np.ndarray) -> None:
        if not sel.any():
            return
        keys = np.stack([ops["rank"][sel].astype(np.int64), ops["pg"][sel].astype(np.int64),
                         ops["op"][sel].astype(np.int64)], axis=1)
        uniq, counts = np.unique(keys, axis=0, return_counts=True)
        for (r, g, k), c in zip(uniq.tolist(), counts.tolist()):
            self.counts[(r, g, k)] += c

    def times(self, end_ns: int) -> list[int]:
        """When the reports were taken: every ``every_s`` from the job's last event while it
        stood still, and at the end."""
        last = self.sim.cfg.t0_ns + int(self.sim.last)
        out = list(range(last + self.every_ns, end_ns, self.every_ns))
        return [*out, end_ns]

    def end(self, end_ns: int) -> None:
        docs = [json.dumps(self._report(t), indent=2) for t in self.times(end_ns)]
        self.path.write_text("\n".join(docs) + "\n")
        self.n_reports = len(docs)

    def _report(self, t_ns: int) -> dict:
        sim, lay = self.sim, self.sim.lay
        index = {name: i for i, name in enumerate(sim.strings)}
        local = local_index(lay)
        comms = []
        for name, ranks in lay.groups:
            g = index[name]
            present, missing = [], []
            for i, r in enumerate(ranks):
                host = address_of(int(lay.host_of[r]))
                gone = self.exit_ns.get(r)
                if gone is not None and gone < t_ns:
                    missing.append({
                        "rank": i, "host": host, "pid": pid_of(r), "cuda_dev": local[r],
                        "nvml_dev": local[r],
                        "status": {"unresponsive": True,
                                   "considered_dead": t_ns - gone >= DEAD_AFTER_NS}})
                    continue
                counts = {f: 0 for f in RAS_COLLECTIVES}
                for k, op in enumerate(OP_NAMES):
                    c = self.counts.get((r, g, k))
                    if c:
                        counts[nccl_func(op)] = counts.get(nccl_func(op), 0) + c
                present.append({
                    "rank": i, "host": host, "pid": pid_of(r), "cuda_dev": local[r],
                    "nvml_dev": local[r],
                    "status": {"init_state": 0, "async_error": 0, "finalize_called": False,
                               "destroy_flag": False, "abort_flag": False},
                    "collective_counts": counts})
            h = comm_hash(sim.cfg.job, sim.cfg.seed, name)
            comms.append({"hash": f"0x{h:x}",
                          "secondary_hash": f"0x{h ^ 0x5A5A5A5A:x}:0x{(h >> 7) & 0xFFFFFF:x}",
                          "size": len(ranks), "ranks_count": len(present),
                          "missing_ranks_count": len(missing), "ranks": present,
                          "missing_ranks": missing})
        return {"nccl_version": "2.30.7", "cuda_runtime_version": 13000,
                "cuda_driver_version": 13000,
                "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t_ns / 1e9)),
                "communicators_count": len(comms), "communicators": comms,
                "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}
