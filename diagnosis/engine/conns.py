"""Connection records: a bounded window of recent transfers and each connection's slowness
series against its own learnt baseline."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import ne

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.distinct import distinct_inverse
from diagnosis.engine.records import ConnRecords
from diagnosis.engine.series import SeriesBank

_BITS = 24


class ConnWindow:
    """Per connection key (src, dst, pg): the latest recorded path and a slowness series; plus
    the transfers still open (for localizing hangs) and recent finished ones (for clearing)."""

    def __init__(self, arena: Arena, config: EngineConfig) -> None:
        self.arena, self.cfg = arena, config
        self.bank = SeriesBank(config.history, config.comm_skip, config.comm_learn)
        self._keys: dict[int, int] = {}
        self.src = np.zeros(0, dtype=np.int64)
        self.dst = np.zeros(0, dtype=np.int64)
        self.pg = np.zeros(0, dtype=np.int64)
        self.path: list[tuple[str, ...] | None] = []
        self.changed: list[int] = []    # keys that are new or changed path since last synced
        self.path_version = 0           # grows whenever a key's path is set or changed
        self.last_end = np.zeros(0, dtype=np.int64)   # last time a transfer of the key finished
        # how uncertain that time is: 0 for a transfer record, a window's length for a window
        # statistic (the transfer ended somewhere in the window that ends last_end + spread)
        self.end_spread = np.zeros(0, dtype=np.int64)
        self.last_seq = np.zeros(0, dtype=np.int64)   # highest seq of a finished transfer (-1)
        self.last_dur = np.zeros(0, dtype=np.int64)   # how long its last finished transfer took
        self.last_bytes = np.zeros(0, dtype=np.int64)  # what its last two finished transfers
        self.prev_bytes = np.zeros(0, dtype=np.int64)  # carried (0: none)
        self.transfers = np.zeros(0, dtype=bool)   # fed transfers, not sampled socket intervals
        # open transfers: key, start, pg id, seq
        self.open_key = np.zeros(0, dtype=np.int64)
        self.open_start = np.zeros(0, dtype=np.int64)
        self.open_seq = np.zeros(0, dtype=np.int64)
        self.total = 0
        self.first_ns = -1     # the earliest transfer start seen: when the evidence begins

    def __len__(self) -> int:
        return len(self.path)

    def keys_of(self, src: np.ndarray, dst: np.ndarray, pg: np.ndarray) -> np.ndarray:
        key = ((pg.astype(np.int64) + 1) << (2 * _BITS)) | (src.astype(np.int64) << _BITS) \
            | dst.astype(np.int64)
        uniq, inv = distinct_inverse(key)
        keys = uniq.tolist()
        # every key looked up at once; only the new ones take a Python step
        ids = np.fromiter(map(self._keys.get, keys, repeat(-1)), np.int64, len(keys))
        new_src, new_dst, new_pg = [], [], []
        mask = (1 << _BITS) - 1
        for i in np.flatnonzero(ids < 0).tolist():
            k = keys[i]
            kid = self._keys[k] = len(self.path)
            self.path.append(None)
            self.changed.append(kid)
            new_src.append((k >> _BITS) & mask)
            new_dst.append(k & mask)
            new_pg.append((k >> (2 * _BITS)) - 1)
            ids[i] = kid
        if new_src:
            self.src = np.r_[self.src, new_src]
            self.dst = np.r_[self.dst, new_dst]
            self.pg = np.r_[self.pg, new_pg]
            self.last_end = np.r_[self.last_end, np.full(len(new_src), -1, dtype=np.int64)]
            self.end_spread = np.r_[self.end_spread, np.zeros(len(new_src), dtype=np.int64)]
            self.last_seq = np.r_[self.last_seq, np.full(len(new_src), -1, dtype=np.int64)]
            zeros = np.zeros(len(new_src), dtype=np.int64)
            self.last_dur = np.r_[self.last_dur, zeros]
            self.last_bytes = np.r_[self.last_bytes, zeros]
            self.prev_bytes = np.r_[self.prev_bytes, zeros]
            self.transfers = np.r_[self.transfers, np.zeros(len(new_src), dtype=bool)]
        return ids[inv]

    def add(self, recs: ConnRecords, pg_ids: np.ndarray, sampled: bool = False) -> None:
        """``pg_ids`` are the engine's pg ids of each row (-1: none). ``sampled``: the rows are
        intervals of sampled socket counters, not transfers."""
        n = len(recs)
        if n == 0:
            return
        self.total += n
        t0 = int(recs.t_start_ns.min())
        self.first_ns = t0 if self.first_ns < 0 else min(self.first_ns, t0)
        key = self.keys_of(recs.src, recs.dst, pg_ids)
        if not sampled:
            self.transfers[key] = True
        if recs.paths is not None:
            self.set_paths(key, recs.paths)
        start = self._effective_start(recs, pg_ids)
        done = recs.t_end_ns >= 0
        if (~done).any():
            self.open_key = np.r_[self.open_key, key[~done]]
            self.open_start = np.r_[self.open_start, recs.t_start_ns[~done]]
            self.open_seq = np.r_[self.open_seq, recs.seq[~done]]
            self.prune_open()
        # a transfer that finished closes an open one of the same key and seq
        if done.any() and len(self.open_key):
            closed = np.isin(self.open_key * (1 << 32) + self.open_seq,
                             key[done] * (1 << 32) + recs.seq[done]) & (self.open_seq >= 0)
            loose = np.flatnonzero(self.open_seq < 0)
            if len(loose):
                # no seq: the same transfer is the one of the same key that began with it
                fin = set(zip(key[done].tolist(), recs.t_start_ns[done].tolist()))
                closed[loose] = [(k, t) in fin for k, t in zip(
                    self.open_key[loose].tolist(), self.open_start[loose].tolist())]
            if closed.any():
                self.open_key, self.open_start, self.open_seq = (
                    a[~closed] for a in (self.open_key, self.open_start, self.open_seq))
        if not done.any():
            return
        # an interval of sampled socket counters moves as much as the job asks for, not as
        # much as it could: only those of a known call measure the network
        timed = done & (recs.seq >= 0) if sampled else done
        self._finished(key[done], recs.take(np.flatnonzero(done)), start[done], timed[done])

    def set_paths(self, key: np.ndarray, paths: Sequence[Sequence[str] | None]) -> None:
        """The recorded path of each row (None or empty: not recorded), row by row: a key whose
        path changes is marked changed (once per change)."""
        keys = key.tolist()
        # the common batch changes nothing: every recorded path is its key's already, which
        # one comparison per row in C tells (then no row can change a path, whatever repeats)
        if not any(map(ne, map(self.path.__getitem__, keys), paths)):
            return
        for k, p in zip(keys, paths):
            if p and self.path[k] != (tp := tuple(p)):
                self.path[k] = tp
                self.changed.append(k)
                self.path_version += 1

    def add_samples(self, recs: ConnRecords, key: np.ndarray, ended_by: np.ndarray) -> None:
        """Finished transfers of known keys that time the network as they are (a window's
        mean transfer of a connection, see ``linkstats``); ``ended_by``: the earliest time
        each surely finished (a window's start: what proves its path alive)."""
        if len(recs) == 0:
            return
        self.total += len(recs)
        t0 = int(recs.t_start_ns.min())
        self.first_ns = t0 if self.first_ns < 0 else min(self.first_ns, t0)
        self.transfers[key] = True
        self._finished(key, recs, recs.t_start_ns, np.ones(len(recs), dtype=bool), ended_by)
        self.end_spread[key] = np.maximum(recs.t_end_ns - ended_by, 0)

    def _finished(self, key: np.ndarray, recs: ConnRecords, start: np.ndarray,
                  timed: np.ndarray, ended_by: np.ndarray | None = None) -> None:
        np.maximum.at(self.last_end, key, recs.t_end_ns if ended_by is None else ended_by)
        np.maximum.at(self.last_seq, key, recs.seq)
        self._remember_last(key, recs.bytes, np.maximum(recs.t_end_ns - recs.t_start_ns, 0))
        if not timed.any():
            return
        k, end = key[timed], recs.t_end_ns[timed]
        dur = np.maximum(end - start[timed], 1).astype(np.float64)
        per_byte = dur / np.maximum(recs.bytes[timed], 1)
        self.bank.add(k, per_byte, end)

    def transfer_ns(self, pg: np.ndarray) -> np.ndarray:
        """Per engine pg id: the longest latest transfer of its connections (NaN: none)."""
        out = np.full(len(pg), np.nan)
        has = (self.pg >= 0) & (self.last_end >= 0)
        if not has.any() or not len(pg):
            return out
        top = np.full(int(max(self.pg.max(), pg.max())) + 1, -1, dtype=np.int64)
        np.maximum.at(top, self.pg[has], self.last_dur[has])
        ok = (pg >= 0) & (pg < len(top))
        got = np.where(ok, top[np.clip(pg, 0, len(top) - 1)], -1)
        return np.where(got >= 0, got.astype(np.float64), np.nan)

    def set_open(self, key: np.ndarray, start: np.ndarray, seq: np.ndarray) -> None:
        """Replace the open transfers (as a window statistic tells them)."""
        self.open_key, self.open_start, self.open_seq = (
            np.asarray(a, dtype=np.int64) for a in (key, start, seq))
        self.prune_open()

    def _remember_last(self, key: np.ndarray, nbytes: np.ndarray, dur: np.ndarray) -> None:
        """Per key, the duration and bytes of its latest finished transfer and the bytes of the
        one before (rows arrive in time order; a key may recur within a batch)."""
        order = np.argsort(key, kind="stable")
        k, b, d = key[order], nbytes[order], dur[order]
        new = np.r_[True, k[1:] != k[:-1]]
        last = np.r_[new[1:], True]
        before = np.where(new, self.last_bytes[k], np.r_[0, b[:-1]])
        self.prev_bytes[k[last]] = before[last]
        self.last_bytes[k[last]] = b[last]
        self.last_dur[k[last]] = d[last]

    def _effective_start(self, recs: ConnRecords, pg_ids: np.ndarray) -> np.ndarray:
        """A transfer cannot start before both ends entered the operation it belongs to: measure
        from the later of its start and the two entries, so that a late peer (a compute fault)
        does not look like a slow connection. The ends' clocks may disagree by up to
        ``clock_skew_ns``: an entry later than the start by less than that is no evidence of a
        late peer, and taking it would turn the hosts' clock offsets into noise of up to that
        much on every short transfer."""
        start = recs.t_start_ns.copy()
        has = (pg_ids >= 0) & (recs.seq >= 0)
        if has.any():
            rows = np.flatnonzero(has)
            enter = self.arena.entered(pg_ids[rows], recs.seq[rows], recs.src[rows],
                                       recs.dst[rows])
            late = enter - start[rows] > self.cfg.clock_skew_ns
            start[rows] = np.where(late, enter, start[rows])
        return start

    def prune_open(self, limit: int = 200_000) -> None:
        """Bounded memory: keep the ``limit`` most recent open transfers (a hung job stops
        starting new ones, so the stuck ones stay)."""
        if len(self.open_key) > limit:
            keep = np.argsort(self.open_start, kind="stable")[-limit:]
            keep.sort()
            self.open_key, self.open_start, self.open_seq = (
                a[keep] for a in (self.open_key, self.open_start, self.open_seq))
