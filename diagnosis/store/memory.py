"""A store that keeps everything in process memory: for benchmarks of the daemon's own path,
for tests, and for a throwaway daemon. Nothing survives a restart (``memory://``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from c4.proto.codec import CONN_COLUMNS, OP_COLUMNS, Columns, concat, empty_columns
from c4.report import FaultReport
from diagnosis.store import _common
from diagnosis.store.api import (
    BatchRows,
    ConnRows,
    DetailRows,
    GroupRecord,
    JobRecord,
    OpRows,
    RankRecord,
    RemovedJob,
    Store,
    StoredBatch,
    StoredDetail,
    Write,
)

_KEY = ("rank", "pg", "op", "peer", "seq")


class MemoryStore(Store):
    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[tuple[str, int], int] = {}    # -> when stored
        self._seen: dict[tuple[str, int], int] = {}       # job attempt -> last stored
        self._ranks: dict[tuple[str, int], dict[int, RankRecord]] = {}
        self._groups: dict[tuple[str, int], dict[str, GroupRecord]] = {}
        self._ops: dict[tuple[str, int], list[Columns]] = {}
        self._conns: dict[tuple[str, int], list[Columns]] = {}
        self._faults: dict[str, FaultReport] = {}
        self._batches: dict[tuple[str, int], list[StoredBatch]] = {}
        self._details: list[StoredDetail] = []
        # per job attempt: (parts summarized, summary or None without ops), so status calls
        # stay cheap
        self._agg: dict[tuple[str, int], tuple[int, _common.OpAgg | None]] = {}

    @classmethod
    def from_url(cls, url: str) -> MemoryStore:
        return cls()

    def write(self, writes: Sequence[Write]) -> list[bool]:
        dups = []
        now = time.time_ns()
        with self._lock:
            for w in writes:
                key = (w.sidecar, w.seq)
                dup = key in self._applied
                dups.append(dup)
                if dup:
                    continue
                self._applied[key] = now
                b = w.body
                self._seen[(b.job, b.attempt)] = now
                if isinstance(b, RankRecord):
                    self._ranks.setdefault((b.job, b.attempt), {})[b.rank] = b
                elif isinstance(b, GroupRecord):
                    self._groups.setdefault((b.job, b.attempt), {})[b.pg] = b
                elif isinstance(b, OpRows):
                    self._ops.setdefault((b.job, b.attempt), []).append(b.cols)
                elif isinstance(b, ConnRows):
                    self._conns.setdefault((b.job, b.attempt), []).append(b.cols)
                elif isinstance(b, BatchRows):
                    self._batches.setdefault((b.job, b.attempt), []).append(
                        StoredBatch(b.kind, b.count, b.t_lo, b.t_hi, b.payload))
                elif isinstance(b, DetailRows):
                    self._details.append(StoredDetail(b.fault_id, b.job, b.attempt, b.host,
                                                      b.count, b.payload))
                else:
                    raise TypeError(f"cannot store a {type(b).__name__}")
        return dups

    def _attempt(self, job: str, attempt: int | None) -> tuple[str, int] | None:
        attempts = [a for (j, a) in self._ranks if j == job]
        if attempt is None:
            return (job, max(attempts)) if attempts else None
        return (job, attempt) if attempt in attempts else None

    def _all_ops(self, key: tuple[str, int] | None) -> Columns:
        parts = self._ops.get(key, []) if key else []
        if not parts:
            return empty_columns(OP_COLUMNS)
        cols = concat(list(parts))
        # One row per call: the last completed row wins over open ones.
        names = np.asarray(cols.strings, dtype=object)
        keys = [cols[k] if k not in ("pg", "op") else names[cols[k]].astype(str) for k in _KEY]
        done = cols["t_end_ns"] >= 0
        order = np.lexsort((done, *reversed(keys)))
        sorted_keys = [k[order] for k in keys]
        last = np.ones(len(order), dtype=bool)
        same = np.ones(len(order) - 1, dtype=bool)
        for k in sorted_keys:
            same &= k[1:] == k[:-1]
        last[:-1] = ~same
        pick = order[last]
        pick = pick[np.lexsort((cols["rank"][pick], cols["t_enter_ns"][pick]))]
        errors = {new: cols.error_text[old] for new, old in enumerate(pick.tolist())
                  if old in cols.error_text}
        return Columns({k: v[pick] for k, v in cols.columns.items()}, cols.strings, errors)

    def ops(self, job: str, attempt: int | None = None, *, rank: int | None = None,
            pg: str | None = None, limit: int = 0) -> Columns:
        with self._lock:
            cols = self._all_ops(self._attempt(job, attempt))
        mask = np.ones(len(cols), dtype=bool)
        if rank is not None:
            mask &= cols["rank"] == rank
        if pg is not None:
            mask &= np.asarray(cols.names("pg") == pg, dtype=bool) if len(cols) else mask
        rows = np.flatnonzero(mask)[: limit or None]
        errors = {i: cols.error_text[r] for i, r in enumerate(rows.tolist())
                  if r in cols.error_text}
        picked = {k: v[rows] for k, v in cols.columns.items()}
        # A fresh string table holding only the strings these rows use, like the other stores.
        used = np.unique(np.concatenate([picked[k] for k in ("pg", "op", "dtype")]))
        remap = np.zeros(len(cols.strings) or 1, dtype=np.uint32)
        remap[used] = np.arange(len(used), dtype=np.uint32)
        for k in ("pg", "op", "dtype"):
            picked[k] = remap[picked[k]]
        return Columns(picked, [cols.strings[i] for i in used.tolist()], errors)

    def count_ops(self, job: str, attempt: int | None = None) -> int:
        return len(self.ops(job, attempt))

    def conns(self, job: str, attempt: int | None = None) -> Columns:
        with self._lock:
            key = self._attempt(job, attempt)
            parts = list(self._conns.get(key, [])) if key else []
        if not parts:
            return empty_columns(CONN_COLUMNS)
        cols = concat(parts)
        order = np.argsort(cols["t_ns"], kind="stable")
        return Columns({k: v[order] for k, v in cols.columns.items()}, cols.strings)

    def batches(self, job: str, attempt: int | None = None, *,
                kinds: Sequence[str] | None = None) -> list[StoredBatch]:
        with self._lock:
            key = self._attempt_of_batches(job, attempt)
            found = list(self._batches.get(key, [])) if key else []
        picked = [b for b in found if kinds is None or b.kind in kinds]
        order = sorted(range(len(picked)), key=lambda i: (picked[i].t_lo, i))
        return [picked[i] for i in order]

    def _attempt_of_batches(self, job: str, attempt: int | None) -> tuple[str, int] | None:
        if attempt is not None:
            return (job, attempt)
        attempts = [a for (j, a) in (*self._ranks, *self._batches) if j == job]
        return (job, max(attempts)) if attempts else None

    def details(self, job: str, fault_id: str | None = None) -> list[StoredDetail]:
        with self._lock:
            return [d for d in self._details
                    if d.job == job and (fault_id is None or d.fault_id == fault_id)]

    def ranks(self, job: str, attempt: int | None = None) -> list[RankRecord]:
        with self._lock:
            key = self._attempt(job, attempt)
            return sorted(self._ranks.get(key, {}).values(), key=lambda r: r.rank) if key else []

    def groups(self, job: str, attempt: int | None = None) -> list[GroupRecord]:
        with self._lock:
            key = self._attempt(job, attempt)
            return sorted(self._groups.get(key, {}).values(), key=lambda g: g.pg) if key else []

    def jobs(self) -> list[JobRecord]:
        with self._lock:
            keys = list(self._ranks)
        ranks: dict[tuple[str, int], _common.RankAgg] = {}
        ops: dict[tuple[str, int], _common.OpAgg] = {}
        for key in keys:
            recs = list(self._ranks[key].values())
            ranks[key] = _common.RankAgg(
                world_size=max(r.world_size for r in recs), ranks_seen=len(recs),
                hosts={r.host for r in recs},
                first_ns=min((r.t_ns for r in recs if r.t_ns > 0), default=0),
                last_ns=max(r.t_ns for r in recs))
            with self._lock:
                parts = len(self._ops.get(key, []))
                cached = self._agg.get(key)
            if cached is None or cached[0] != parts:
                cols = self.ops(key[0], key[1])
                agg = None
                if len(cols):
                    last = max(int(cols["t_enter_ns"].max()), int(cols["t_end_ns"].max()))
                    agg = _common.OpAgg(len(cols), int(cols["t_enter_ns"].min()), last)
                cached = (parts, agg)
                with self._lock:
                    self._agg[key] = cached
            if cached[1] is not None:
                ops[key] = cached[1]
        return _common.build_jobs(ranks, ops)

    def job_seen(self) -> dict[str, int]:
        with self._lock:
            ranked = {job for job, _ in self._ranks}
            out: dict[str, int] = {}
            for (job, _), t in self._seen.items():
                if job in ranked:
                    out[job] = max(out.get(job, 0), t)
            return out

    def remove_job(self, job: str) -> RemovedJob:
        with self._lock:
            attempts = {a for (j, a) in (*self._ranks, *self._seen) if j == job}
            for table in (self._ranks, self._groups, self._ops, self._conns, self._batches,
                          self._seen, self._agg):
                for key in [k for k in table if k[0] == job]:
                    del table[key]
            self._details = [d for d in self._details if d.job != job]
            faults = [fid for fid, r in self._faults.items() if r.job == job]
            for fid in faults:
                del self._faults[fid]
        return RemovedJob(job, len(attempts), len(faults))

    def forget_applied(self, before_ns: int) -> int:
        with self._lock:
            old = [k for k, t in self._applied.items() if t < before_ns]
            for k in old:
                del self._applied[k]
            return len(old)

    def put_fault(self, report: FaultReport) -> None:
        with self._lock:
            old = self._faults.get(report.id)
            if old is None or report.revision >= old.revision:
                self._faults[report.id] = report

    def get_fault(self, fault_id: str) -> FaultReport | None:
        with self._lock:
            return self._faults.get(fault_id)

    def list_faults(self, job: str | None = None, *, open_only: bool = False,
                    limit: int = 0) -> list[FaultReport]:
        with self._lock:
            found = [r for r in self._faults.values() if job is None or r.job == job]
        return _common.newest_first(found, open_only=open_only, limit=limit)

    def count_faults(self, job: str | None = None, *, open_only: bool = False) -> int:
        with self._lock:
            return sum(1 for r in self._faults.values()
                       if (job is None or r.job == job) and (not open_only or r.state == "open"))
