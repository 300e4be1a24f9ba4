"""Operation rows of NCCL's sources (:class:`~diagnosis.nccl.records.NcclOps`) -> c4's op rows.

Once the job is reconciled (:class:`~diagnosis.nccl.job.Resolved`), each row gets its global
rank, its communicator's name, a per-communicator sequence number (:mod:`diagnosis.nccl.seqmap`;
rows must come in each stream's completion order, a file read front to back or followed), the
peer's global rank for sends and receives, c4's ``bytes`` (the rank's input) and times in ns.
Rows of a communicator whose members are not all known, of a process no rank was given to, or
repeating a call already seen are left out and counted.

The converter also remembers, per (rank, communicator), which collectives completed when
(:class:`Frontiers`): RAS counts launches, and only with the completions beside them do they
say which calls a rank is inside (:mod:`diagnosis.nccl.ras_progress`).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import islice

import numpy as np

from c4.proto.codec import OP_COLUMNS, Columns
from diagnosis.nccl.ids import bytes_from_msg
from diagnosis.nccl.job import Resolved
from diagnosis.nccl.records import NcclOps
from diagnosis.nccl.seqmap import SeqMapper

log = logging.getLogger(__name__)

__all__ = ["Frontiers", "OpConverter"]


@dataclass
class _Stream:
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=list)
    ops: list[str] = field(default_factory=list)
    seq: np.ndarray | None = None
    op: np.ndarray | None = None
    sn: np.ndarray | None = None
    end: np.ndarray | None = None

    def compact(self) -> None:
        if not self.chunks:
            return
        parts = self.chunks
        if self.seq is not None:
            parts = [(self.seq, self.op, self.sn, self.end), *parts]   # type: ignore[list-item]
        seq, op, sn, end = (np.concatenate([p[i] for p in parts]) for i in range(4))
        order = np.argsort(seq, kind="stable")
        self.seq, self.op, self.sn, self.end = seq[order], op[order], sn[order], end[order]
        self.chunks = []


class Frontiers:
    """Per (rank, communicator): the collectives completed, with NCCL's numbers, and when."""

    def __init__(self) -> None:
        self._streams: dict[tuple[int, str], _Stream] = defaultdict(_Stream)
        self._op_ids: dict[str, int] = {}
        self.gappy: dict[tuple[int, str], set[str]] = {}

    def add(self, rank: np.ndarray, pg: np.ndarray, seq: np.ndarray, op: np.ndarray,
            names: list[str], sn: np.ndarray, end_ns: np.ndarray) -> None:
        """Completed collectives: ``pg`` and ``op`` index ``names``."""
        ids = np.asarray([self._op_ids.setdefault(o, len(self._op_ids)) for o in names],
                         dtype=np.int64)[op]
        key = rank.astype(np.int64) * (len(names) + 1) + pg
        order = np.argsort(key, kind="stable")
        k = key[order]
        cuts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        for a, b in zip(cuts.tolist(), [*cuts[1:].tolist(), len(k)]):
            rows = order[a:b]
            i = int(rows[0])
            self._streams[(int(rank[i]), names[int(pg[i])])].chunks.append(
                (seq[rows], ids[rows], sn[rows], end_ns[rows]))

    def at(self, rank: int, pg: str, t_ns: int) -> tuple[int, dict[str, int]] | None:
        """The seq of the last collective the rank completed by ``t_ns`` on ``pg`` and, per
        type, the highest NCCL number completed up to it; None when none had completed."""
        st = self._streams.get((rank, pg))
        if st is None:
            return None
        st.compact()
        assert st.seq is not None and st.end is not None and st.op is not None \
            and st.sn is not None
        done = st.end <= t_ns
        if not done.any():
            return None
        frontier = int(st.seq[done].max())
        upto = st.seq <= frontier
        names = {v: k for k, v in self._op_ids.items()}
        last = {}
        for oid in np.unique(st.op[upto]).tolist():
            last[names[oid]] = int(st.sn[upto & (st.op == oid)].max())
        return frontier, last

    def known(self, rank: int, pg: str) -> bool:
        return (rank, pg) in self._streams


#: completed calls as given to :meth:`History.add`: rank, pg, op, names, peer, seq, end
_Batch = tuple[np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray]


class History:
    """Per rank, the calls it completed (communicator, op, peer, seq, end), to tell what it
    does next: a rank's calls repeat every iteration, so the call that followed its last one
    the previous times is the one it is in now when it has been silent since."""

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self._rows: dict[int, list[tuple[int, str, str, int, int]]] = defaultdict(list)
        # batches not yet split into per-rank rows: that is done when a rank is asked about
        # (RAS reports a rank idle), for the last ``keep`` rows of each rank only
        self._pending: list[_Batch] = []
        # ranks given rows since their list was last put in order; each rank's (pg, op, peer)
        # per row, kept beside the rows (what a pattern is matched on)
        self._dirty: set[int] = set()
        self._sig: dict[int, list[tuple[str, str, int]]] = {}
        self._codes: dict[int, np.ndarray] = {}       # the same, each as a number
        self._sig_ids: dict[tuple[str, str, int], int] = {}

    def add(self, rank: np.ndarray, pg: np.ndarray, op: np.ndarray, names: list[str],
            peer: np.ndarray, seq: np.ndarray, end_ns: np.ndarray) -> None:
        """Completed calls: ``pg`` and ``op`` index ``names``."""
        self._pending.append((rank, pg, op, names, peer, seq, end_ns))

    def _flush(self) -> None:
        if not self._pending:
            return
        parts, self._pending = self._pending, []
        rank = np.concatenate([p[0] for p in parts])
        # per rank, only its last ``keep`` rows of these batches can survive the trim
        cut = np.zeros(len(rank), dtype=bool)
        order = np.argsort(rank, kind="stable")
        r = rank[order]
        cuts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        for a, b in zip(cuts.tolist(), [*cuts[1:].tolist(), len(r)]):
            cut[order[max(a, b - self.keep):b]] = True
        base = 0
        for rk, pg, op, names, peer, seq, end in parts:
            sel = np.flatnonzero(cut[base:base + len(rk)])
            base += len(rk)
            for r_, g, o, p, s, e in zip(rk[sel].tolist(), pg[sel].tolist(), op[sel].tolist(),
                                         peer[sel].tolist(), seq[sel].tolist(),
                                         end[sel].tolist()):
                self._rows[r_].append((e, names[g], names[o], p, s))
            self._dirty.update(rk[sel].tolist())

    def _sorted(self, rank: int) -> list[tuple[int, str, str, int, int]]:
        self._flush()
        rows = self._rows.get(rank, [])
        if rank in self._dirty:
            self._dirty.discard(rank)
            if any(rows[i][0] > rows[i + 1][0] for i in range(len(rows) - 1)):
                rows.sort()
            if len(rows) > self.keep:
                del rows[: len(rows) - self.keep]
            sig = self._sig[rank] = [row[1:4] for row in rows]
            ids = self._sig_ids
            self._codes[rank] = np.fromiter((ids.setdefault(x, len(ids)) for x in sig),
                                            dtype=np.int64, count=len(sig))
        return rows

    def last_end(self, rank: int, t_ns: int) -> int | None:
        """When the rank last completed a call, by ``t_ns``."""
        rows = self._sorted(rank)
        i = _upto(rows, t_ns)
        return rows[i - 1][0] if i else None

    def next_call(self, rank: int, t_ns: int, longest: int = 8
                  ) -> tuple[str, str, int, int] | None:
        """The call (pg, op, peer, seq) that comes after the rank's last completed one by
        ``t_ns``, by its pattern: the call one period back, where its calls repeat with a
        period (:meth:`_period`); else the call that followed its last few calls every time
        before (the shortest such context, seen at least twice, up to ``longest`` calls);
        None when the pattern says nothing. ``seq`` is the next one of that call's stream:
        one past the last seq of that (pg, op, peer) the rank completed (for a collective,
        of its communicator)."""
        rows = self._sorted(rank)
        n = _upto(rows, t_ns)
        sig = self._sig.get(rank, [])
        period = self._period(rank, n)
        nxt = sig[n - period] if period is not None else self._after_context(sig, n, longest)
        if nxt is None:
            return None
        pg, op, peer = nxt
        # a send or receive counts per pair and direction, a collective per communicator:
        # one past the latest of its stream
        same = (rows[i][4] for i in range(n - 1, -1, -1)
                if (sig[i] == nxt if peer >= 0 else sig[i][0] == pg and sig[i][2] < 0))
        return pg, op, peer, next(same, -1) + 1

    def _period(self, rank: int, n: int, span: int = 512) -> int | None:
        """The shortest period P of the rank's first ``n`` calls: each of the last
        max(4 P, ``span``) calls (all, in a shorter history) is the call P before it. A
        training step repeats its calls; a run of alternating calls inside it (a layer's
        all-gather and reduce-scatter) has a shorter period only locally, which the span
        rules out. Candidates are the distances back to the calls like the last one."""
        codes = self._codes.get(rank)
        if codes is None or n < 2:
            return None
        codes = codes[:n]
        for i in np.flatnonzero(codes[: n - 1] == codes[n - 1])[::-1].tolist():
            p = n - 1 - i
            if 2 * p > n:
                break
            w = min(n, max(4 * p, span))
            if np.array_equal(codes[n - w + p:n], codes[n - w:n - p]):
                return p
        return None

    @staticmethod
    def _after_context(sig: list[tuple[str, str, int]], n: int, longest: int
                       ) -> tuple[str, str, int] | None:
        for k in range(1, min(longest, n // 2) + 1):
            ctx = sig[n - k:n]
            # the latest three times the context came before (scanning back, lazily)
            after = list(islice((sig[i] for i in range(n - 1, k - 1, -1)
                                 if sig[i - k:i] == ctx), 3))
            if len(after) < 2:
                return None
            if all(a == after[0] for a in after):
                return after[0]
        return None

    def next_p2p(self, rank: int, t_ns: int, longest: int = 8) -> tuple[str, str, int, int] | None:
        """:meth:`next_call` when that is a send or a receive, else None."""
        nxt = self.next_call(rank, t_ns, longest)
        return nxt if nxt is not None and nxt[1] in ("send", "recv") else None


def _upto(rows: list[tuple[int, str, str, int, int]], t_ns: int) -> int:
    lo, hi = 0, len(rows)
    while lo < hi:
        mid = (lo + hi) // 2
        if rows[mid][0] <= t_ns:
            lo = mid + 1
        else:
            hi = mid
    return lo


class OpConverter:
    """Turns operation rows into c4's, stream state kept between batches.

    ``require_groups``: keep only rows of communicators whose every member is known (offline,
    where the engine needs the whole group). A node following its own files (live) sees part
    of each communicator: it keeps every row with a rank, and gives sends and receives the
    peer's global rank where ``members`` (pg -> global rank by communicator rank, -1 unknown,
    as :class:`~diagnosis.nccl.live.GroupAssembler` collects them) knows it."""

    def __init__(self, resolved: Resolved, require_groups: bool = True,
                 members: dict[str, np.ndarray] | None = None) -> None:
        self.r = resolved
        self.require_groups = require_groups
        self.members = members if members is not None else {}
        self.mapper = SeqMapper()
        self.frontiers = Frontiers()
        self.history = History()
        self.dropped: Counter = Counter()
        self.rows = 0
        self._peer_maps: dict[str, np.ndarray] = {}

    def convert(self, ops: NcclOps) -> Columns | None:
        """The rows c4 can use, as an op batch (``c4.proto.codec.OP_COLUMNS``); None if none."""
        n = len(ops)
        if not n:
            return None
        r = self.r
        canon = [r.canonical.get(p, p) for p in ops.procs]
        proc_rank = np.asarray([r.rank_of.get(p, -1) for p in canon] or [-1], dtype=np.int64)
        comm_pg = [r.pg_of.get(c.hash) for c in ops.comms]
        comm_ok = np.asarray([pg is not None and (pg in r.groups or not self.require_groups)
                              for pg in comm_pg] or [False])
        # streams: one process on one communicator
        code = ops.proc.astype(np.int64) * max(len(ops.comms), 1) + ops.comm
        ucode, stream = np.unique(code, return_inverse=True)
        keys = [(canon[int(c) // max(len(ops.comms), 1)],
                 ops.comms[int(c) % max(len(ops.comms), 1)].hash) for c in ucode.tolist()]
        mapped = self.mapper.map(keys, stream, ops.ops, ops.op, ops.sn, ops.peer)
        for key in keys:
            st = self.mapper.streams.get(key)
            rank = r.rank_of.get(key[0], -1)
            pg = r.pg_of.get(key[1])
            if st is not None and st.gappy and pg is not None:
                self.frontiers.gappy[(rank, pg)] = set(st.gappy)
        rank = proc_rank[ops.proc]
        ok_comm = comm_ok[ops.comm]
        keep = ~mapped.dup & (rank >= 0) & ok_comm & (mapped.seq >= 0)
        self._count_drops(mapped.dup, rank, ok_comm)
        p2p = ops.peer >= 0
        peer = np.full(n, -1, dtype=np.int64)
        if p2p.any():
            for ci in np.unique(ops.comm[p2p]).tolist():
                pg = comm_pg[ci]
                members = self._members(pg)
                rows = p2p & (ops.comm == ci)
                pr = ops.peer[rows]
                good = (pr >= 0) & (pr < len(members))
                out = np.full(len(pr), -1, dtype=np.int64)
                out[good] = members[pr[good]]
                peer[rows] = out
            if self.require_groups:
                keep &= ~p2p | (peer >= 0)
        if not keep.any():
            return None
        idx = np.flatnonzero(keep)
        self.rows += len(idx)
        # names through the batch's small tables, not per row
        table: dict[str, int] = {}
        comm_code = np.asarray([table.setdefault(pg or "", len(table)) for pg in comm_pg]
                               or [0], dtype=np.int64)
        op_code = np.asarray([table.setdefault(o, len(table)) for o in ops.ops] or [0],
                             dtype=np.int64)
        blank = table.setdefault("", len(table))
        names = list(table)
        comm_of, op_of = ops.comm[idx], ops.op[idx]
        pg_col, op_col = comm_code[comm_of], op_code[op_of]
        nranks = np.asarray([max(c.nranks, 1) for c in ops.comms] or [1], dtype=np.int64)
        scaled = np.asarray([bytes_from_msg(o, 1, 2) == 2 for o in ops.ops] or [False])
        msg = ops.msg_bytes[idx]
        nbytes = np.where(scaled[op_of], msg * nranks[comm_of], msg)
        end = ops.end_us[idx] * 1000
        enter = ops.enter_us[idx] * 1000
        start = np.where(ops.kstart_us[idx] > 0, ops.kstart_us[idx] * 1000, -1)
        self.history.add(rank[idx], pg_col, op_col, names, peer[idx], mapped.seq[idx], end)
        coll = ~p2p[idx]
        if coll.any():
            ci = np.flatnonzero(coll)
            self.frontiers.add(rank[idx][ci], pg_col[ci], mapped.seq[idx][ci], op_col[ci],
                               names, ops.sn[idx][ci], end[ci])
        cols = {
            "rank": rank[idx], "pg": pg_col, "seq": mapped.seq[idx], "op": op_col,
            "nbytes": nbytes, "dtype": np.full(len(idx), blank), "t_enter_ns": enter,
            "t_start_ns": start, "t_end_ns": end, "status": np.zeros(len(idx)),
            "peer": peer[idx]}
        return Columns({k: np.asarray(cols[k]).astype(dt) for k, dt in OP_COLUMNS.items()},
                       list(table))

    def _members(self, pg: str | None) -> np.ndarray:
        if pg is None:
            return np.zeros(0, dtype=np.int64)
        if pg not in self.r.groups:
            return self.members.get(pg, np.zeros(0, dtype=np.int64))
        m = self._peer_maps.get(pg)
        if m is None:
            m = self._peer_maps[pg] = np.asarray(self.r.groups[pg], dtype=np.int64)
        return m

    def _count_drops(self, dup: np.ndarray, rank: np.ndarray, ok_comm: np.ndarray) -> None:
        for why, mask in (("repeated", dup), ("no_rank", rank < 0),
                          ("incomplete_communicator", ~ok_comm)):
            k = int(mask.sum())
            if k:
                self.dropped[why] += k
