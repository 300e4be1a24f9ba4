"""Telemetry out of time order: a trace made by concatenating per-rank logs, or with shuffled lines.

The engine streams records in the order collectors ship them (a call once it completed, a call
still in flight by its entry) and keeps a bounded window per communicator, so a trace whose rows
go back in time by more than a few seconds is sorted first. :class:`OrderWatch` tells such a
trace apart while it is read; :func:`time_ordered` re-sorts the items of a trace by that order in
runs spilled to disk and merged, so memory stays bounded whatever the trace's size.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from c4.proto.codec import OP_COLUMNS, Columns
from diagnosis.engine.records import (
    CONN_DTYPES,
    LINKSTAT_DTYPES,
    PORT_COUNTERS,
    PROGRESS_DTYPES,
    ConnRecords,
    LinkStatRecords,
    PortRecords,
    ProgressRecords,
)
from diagnosis.trace.reader import Batch, End, Item

#: How far rows may go back in time before the trace counts as out of order: collectors flush
#: about once a second, and exports ordered by entry put a long call's end after later rows.
TOLERANCE_NS = 5_000_000_000
#: How many calls of one communicator a collective's row may come behind the latest one seen:
#: half the engine's window of calls per communicator (a short job's per-rank logs, one after
#: the other, stay within the time tolerance but not within this).
TOLERANCE_CALLS = 32

_OP_STRINGS = ("pg", "op", "dtype")


def op_visible_ns(cols: Columns) -> np.ndarray:
    """When each op row became known: its end, or its entry if it never ended."""
    end = cols.columns["t_end_ns"]
    return np.where(end >= 0, end, cols.columns["t_enter_ns"])


def conn_visible_ns(conns: ConnRecords) -> np.ndarray:
    """When each transfer became known: its end, or its start if it never ended."""
    return np.where(conns.t_end_ns >= 0, conns.t_end_ns, conns.t_start_ns)


class OrderWatch:
    """Follows the rows of a trace as they are read; :meth:`check` is False once a row comes more
    than ``tolerance_ns`` before the latest row seen so far."""

    def __init__(self, tolerance_ns: int = TOLERANCE_NS,
                 tolerance_calls: int = TOLERANCE_CALLS) -> None:
        self.tolerance_ns = int(tolerance_ns)
        self.tolerance_calls = int(tolerance_calls)
        self.high: int | None = None
        self.behind_ns = 0       # the furthest a row went back, once out of order
        self.behind_calls = 0
        self._pg: dict[str, int] = {}
        self._top_seq = np.zeros(0, dtype=np.int64)     # per communicator: latest seq seen

    def check_ops(self, cols: Columns) -> bool:
        """Op rows: in time, and each collective's seq not far behind its communicator's."""
        if not self.check(op_visible_ns(cols)):
            return False
        c = cols.columns
        coll = c["peer"] < 0
        if not coll.any() or not cols.strings:
            return True
        gid = np.asarray([self._pg.setdefault(x, len(self._pg)) for x in cols.strings],
                         dtype=np.int64)
        if len(self._top_seq) < len(self._pg):
            self._top_seq = np.r_[self._top_seq,
                                  np.full(len(self._pg) - len(self._top_seq), -1, np.int64)]
        g = gid[c["pg"][coll].astype(np.int64)]
        seq = c["seq"][coll].astype(np.int64)
        # running max of seq per communicator, in row order: one accumulate over rows grouped
        # by communicator, each group lifted above the previous one
        o = np.argsort(g, kind="stable")
        gs, ss = g[o], seq[o]
        new = np.r_[True, gs[1:] != gs[:-1]]
        seg = np.cumsum(new) - 1
        lift = seg * (int(max(ss.max(), self._top_seq.max(initial=-1))) + 2)
        prior = self._top_seq[gs]
        run = np.maximum.accumulate(np.maximum(ss, np.where(new, prior, -1)) + 1 + lift) \
            - 1 - lift
        before = np.r_[-1, run[:-1]]
        before = np.where(new, prior, before)
        behind = int((before - ss).max())
        last = np.r_[np.flatnonzero(new)[1:] - 1, len(gs) - 1]
        self._top_seq[gs[last]] = run[last]
        if behind > self.tolerance_calls:
            self.behind_calls = behind
            return False
        return True

    def check(self, visible: np.ndarray) -> bool:
        if len(visible) == 0:
            return True
        visible = visible.astype(np.int64, copy=False)
        first = visible[0] if self.high is None else max(self.high, int(visible[0]))
        run = np.maximum.accumulate(np.r_[np.int64(first), visible])
        back = run[:-1] - visible
        self.high = int(run[-1])
        worst = int(back.max())
        if worst > self.tolerance_ns:
            self.behind_ns = worst
            return False
        return True


class _Runs:
    """Rows of one kind (equal-length columns plus their visible time), sorted in runs of at
    most ``run_rows``; full runs are spilled to ``folder`` as one file per column."""

    def __init__(self, folder: Path, name: str, run_rows: int) -> None:
        self.folder, self.name, self.run_rows = folder, name, run_rows
        self._parts: list[dict[str, np.ndarray]] = []
        self._rows = 0
        self.runs: list[dict[str, np.ndarray]] = []
        self._at: list[int] = []

    def add(self, cols: dict[str, np.ndarray]) -> None:
        self._parts.append(cols)
        self._rows += len(cols["vis"])
        if self._rows >= self.run_rows:
            self._close_run(spill=True)

    def _close_run(self, spill: bool) -> None:
        if not self._parts:
            return
        cols = {k: np.concatenate([p[k] for p in self._parts]) for k in self._parts[0]}
        self._parts, self._rows = [], 0
        order = np.argsort(cols["vis"], kind="stable")
        run = {k: v[order] for k, v in cols.items()}
        if spill:
            i = len(self.runs)
            for k, v in run.items():
                np.save(self.folder / f"{self.name}{i}.{k}.npy", v)
            run = {k: np.load(self.folder / f"{self.name}{i}.{k}.npy", mmap_mode="r")
                   for k in run}
        self.runs.append(run)
        self._at.append(0)

    def finish(self) -> None:
        self._close_run(spill=bool(self.runs))

    def bound(self, step: int) -> int | None:
        """The latest time up to which every run can release at most ``step`` rows."""
        out = None
        for run, at in zip(self.runs, self._at):
            vis = run["vis"]
            if at < len(vis):
                t = int(vis[min(at + step, len(vis)) - 1])
                out = t if out is None else min(out, t)
        return out

    def take(self, t: int) -> dict[str, np.ndarray] | None:
        """Every remaining row up to time ``t``, in time order."""
        parts = []
        for i, run in enumerate(self.runs):
            at = self._at[i]
            stop = int(np.searchsorted(run["vis"], t, side="right"))
            if stop > at:
                parts.append({k: np.asarray(v[at:stop]) for k, v in run.items()})
                self._at[i] = stop
        if not parts:
            return None
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        order = np.argsort(cols["vis"], kind="stable")
        return {k: v[order] for k, v in cols.items()}


class _Strings:
    """One string table for every batch of a kind (batches each bring their own)."""

    def __init__(self) -> None:
        self.table: list[str] = []
        self._index: dict[str, int] = {}

    def remap(self, strings: list[str]) -> np.ndarray:
        return np.asarray([self._index.setdefault(s, len(self._index)) for s in strings],
                          dtype=np.int64)

    def index(self, col: np.ndarray, strings: list[str]) -> np.ndarray:
        """``col``, indexes into ``strings`` (-1: none), as indexes into this table."""
        if not strings:
            return np.full(len(col), -1, dtype=np.int64)
        col = np.asarray(col, dtype=np.int64)
        return np.where(col >= 0, self.remap(strings)[np.maximum(col, 0)], -1)

    def sync(self) -> list[str]:
        if len(self.table) != len(self._index):
            self.table = list(self._index)
        return self.table


class _Paths:
    """One table of paths (tuples of node ids) for every batch: rows keep an index, -1 none."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []
        self._ids: dict[tuple[str, ...], int] = {}

    def ids(self, paths: list[tuple[str, ...] | None] | None, n: int) -> np.ndarray:
        pid = np.full(n, -1, dtype=np.int64)
        if paths is not None:
            for i, p in enumerate(paths):
                if p is not None:
                    j = self._ids.get(p)
                    if j is None:
                        j = self._ids[p] = len(self.rows)
                        self.rows.append(p)
                    pid[i] = j
        return pid

    def paths(self, pid: np.ndarray) -> list[tuple[str, ...] | None] | None:
        if (pid < 0).all():
            return None
        return [self.rows[i] if i >= 0 else None for i in pid.tolist()]


class _Kind:
    """How the batches of one record type become flat integer columns for the runs (their
    string and path indexes into tables shared across batches), and come back."""

    def __init__(self, paths: _Paths) -> None:
        self.strings = _Strings()
        self.paths = paths

    def split(self, item: Any) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def join(self, batch: dict[str, np.ndarray]) -> Batch:
        raise NotImplementedError


class _OpKind(_Kind):
    def split(self, item: Any) -> dict[str, np.ndarray]:
        remap = self.strings.remap(item.strings)
        cols = {k: (remap[v.astype(np.int64)] if k in _OP_STRINGS and len(item.strings)
                    else np.asarray(v)) for k, v in item.columns.items()}
        cols["vis"] = op_visible_ns(item)
        return cols

    def join(self, batch: dict[str, np.ndarray]) -> Batch:
        return Columns({k: batch[k].astype(dt, copy=False) for k, dt in OP_COLUMNS.items()},
                       list(self.strings.sync()))


class _ConnKind(_Kind):
    def split(self, item: Any) -> dict[str, np.ndarray]:
        cols = {k: np.asarray(getattr(item, k)) for k in CONN_DTYPES}
        cols["pg"] = self.strings.index(item.pg, item.strings)
        cols["path"] = self.paths.ids(item.paths, len(item))
        cols["retrans"] = (np.full(len(item), -1, dtype=np.int64) if item.retrans is None
                           else item.retrans)
        cols["vis"] = conn_visible_ns(item)
        return cols

    def join(self, batch: dict[str, np.ndarray]) -> Batch:
        retrans = batch["retrans"]
        return ConnRecords(**{k: batch[k] for k in CONN_DTYPES}, strings=list(self.strings.sync()),
                           paths=self.paths.paths(batch["path"]),
                           retrans=None if (retrans < 0).all() else retrans)


class _ProgressKind(_Kind):
    def split(self, item: Any) -> dict[str, np.ndarray]:
        cols = {k: np.asarray(getattr(item, k)) for k in PROGRESS_DTYPES}
        cols["pg"] = self.strings.index(item.pg, item.strings)
        cols["op"] = self.strings.index(item.op, item.strings)
        cols["vis"] = item.t_ns
        return cols

    def join(self, batch: dict[str, np.ndarray]) -> Batch:
        return ProgressRecords(**{k: batch[k] for k in PROGRESS_DTYPES},
                               strings=list(self.strings.sync()))


class _LinkStatKind(_Kind):
    def split(self, item: Any) -> dict[str, np.ndarray]:
        cols = {k: np.asarray(getattr(item, k)) for k in LINKSTAT_DTYPES}
        cols["pg"] = self.strings.index(item.pg, item.strings)
        cols["path"] = self.paths.ids(item.paths, len(item))
        cols["vis"] = item.t_ns
        return cols

    def join(self, batch: dict[str, np.ndarray]) -> Batch:
        return LinkStatRecords(**{k: batch[k] for k in LINKSTAT_DTYPES},
                               strings=list(self.strings.sync()),
                               paths=self.paths.paths(batch["path"]))


class _PortKind(_Kind):
    def split(self, item: Any) -> dict[str, np.ndarray]:
        cols = {"host": self.strings.index(item.host, item.strings),
                "nic": self.strings.index(item.nic, item.strings),
                "t_ns": item.t_ns, "up": item.up, "vis": item.t_ns}
        for name in PORT_COUNTERS:
            col = item.counters.get(name)
            cols[name] = np.full(len(item), -1, dtype=np.int64) if col is None else col
        return cols

    def join(self, batch: dict[str, np.ndarray]) -> Batch:
        # a counter that no row of the batch gives is left out, as the reader does
        counters = {k: batch[k] for k in PORT_COUNTERS if (batch[k] >= 0).any()}
        return PortRecords(batch["host"], batch["nic"], batch["t_ns"], batch["up"],
                           list(self.strings.sync()), counters)


_KINDS: dict[type, tuple[str, type[_Kind]]] = {
    Columns: ("op", _OpKind), ConnRecords: ("conn", _ConnKind),
    ProgressRecords: ("progress", _ProgressKind), LinkStatRecords: ("linkstat", _LinkStatKind),
    PortRecords: ("port", _PortKind)}


def visible_ns(item: Batch) -> np.ndarray:
    """When each row of a batch became known: see :func:`op_visible_ns` and
    :func:`conn_visible_ns`; the rows of version 2 kinds at their ``t_ns``."""
    if isinstance(item, Columns):
        return op_visible_ns(item)
    if isinstance(item, ConnRecords):
        return conn_visible_ns(item)
    return item.t_ns


def time_ordered(items: Iterable[Item], run_rows: int = 1 << 21, step: int = 1 << 16,
                 folder: str | Path | None = None) -> Iterator[Item]:
    """The items of a trace with the rows of each telemetry kind in time order (see
    :func:`visible_ns`).

    Meta, rank and group records pass first, in their order; the telemetry follows in batches
    of at most ``step`` rows per run; the ``end`` record comes last. Runs of ``run_rows`` rows
    are spilled under ``folder`` (a temporary directory by default) and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="c4-sort-", dir=folder) as tmp:
        paths = _Paths()     # conn and linkstat rows name the same paths
        kinds = {cls: (make(paths), _Runs(Path(tmp), name, run_rows))
                 for cls, (name, make) in _KINDS.items()}
        end: End | None = None
        for item in items:
            kind = kinds.get(type(item))
            if kind is not None:
                codec, runs = kind
                runs.add(codec.split(item))
            elif isinstance(item, End):
                end = item
            else:
                yield item
        for _, runs in kinds.values():
            runs.finish()
        while True:
            bounds = [b for _, runs in kinds.values() if (b := runs.bound(step)) is not None]
            if not bounds:
                break
            t = min(bounds)
            for codec, runs in kinds.values():
                batch = runs.take(t)
                if batch is not None:
                    yield codec.join(batch)
        if end is not None:
            yield end
