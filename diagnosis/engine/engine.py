"""The detection engine: feed it ranks, groups, op and connection records (from a trace or live
telemetry), call ``advance`` with the data's clock, get fault reports.

Data flows one way: records update the state (``state.JobState``: per-communicator timing,
connection windows, progress, the ranks' clocks); the detectors judge it and their report
builders turn what they find into frozen ``reporter.Finding``s; the one ``reporter.Reporter``
decides which incident each belongs to, revises and ends reports; ``advance`` returns the
reports that changed, which the daemon stores.

Memory is bounded: each communicator keeps its last ``window`` calls, each member and connection
its last ``history`` samples, so the engine can run for ever and a trace streams through it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from c4.proto.codec import Columns
from c4.proto.sampling import is_sampled, prefix_state, sampled_after
from c4.reduce.sampling import take
from c4.report import FaultReport
from c4.topology.protocol import TopologyLike
from diagnosis.engine.arena import Arena, Finished, slot_cuts
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.distinct import distinct, distinct_inverse
from diagnosis.engine.hang_reports import Delivery, HangReports
from diagnosis.engine.hangs import awaited, op_key
from diagnosis.engine.linkstats import LinkStatFeed
from diagnosis.engine.localize import Localizer
from diagnosis.engine.lossy import LossyLinks
from diagnosis.engine.owntime import OwnClock
from diagnosis.engine.placement import Placement
from diagnosis.engine.ports import PortBoard
from diagnosis.engine.progress import ProgressBoard
from diagnosis.engine.records import ConnRecords, LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.engine.reporter import Reporter
from diagnosis.engine.slow import NoncommSlow
from diagnosis.engine.slow_reports import SlowReports
from diagnosis.engine.stalls import StallsAfterTheFact
from diagnosis.engine.state import JobState
from diagnosis.engine.straggle import SampledStragglers
from diagnosis.engine.teardown import TeardownGate
from diagnosis.engine.timing import GroupTiming
from diagnosis.engine.tomography import PathCache

log = logging.getLogger(__name__)

_NAMES_REMEMBERED = 10_000     # unknown group names remembered (to warn once each)

# (as hangs.op_key spells them: any recorder's spelling of send and recv)
SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})


class Engine:
    def __init__(self, topology: TopologyLike | None = None,
                 config: EngineConfig | None = None) -> None:
        self.cfg = config or EngineConfig()
        self.topology = topology
        self.placement = Placement(topology)
        self.arena = Arena(self.cfg.window)
        self.clock = OwnClock()
        self.timing = GroupTiming(self.arena, self.cfg)
        self.slow = NoncommSlow(self.arena, self.cfg)
        self.stragglers = SampledStragglers(self.arena, self.timing, self.cfg, self.placement)
        self.conns = ConnWindow(self.arena, self.cfg)
        paths = PathCache(topology) if topology is not None else None
        self.ports = PortBoard(topology)
        self.localizer = Localizer(self.arena, self.placement, paths, self.cfg)
        self.reporter = Reporter()
        self.pg_names: list[str] = []
        self._pg_ids: dict[str, int] = {}
        self._pg_group = np.zeros(0, dtype=np.int64)
        self.op_names: list[str] = []
        # the stream keeps one call in ``sample`` (c4.proto.sampling; the largest factor in force)
        self.sample = 1
        self._sample_at: dict[str, list[tuple[int, int]]] = {}   # pg -> (from seq, k) steps
        self._prefixes: dict[int, int] = {}   # communicator or channel -> crc32 prefix state
        self._default_sample = 1
        self._op_ids: dict[str, int] = {}
        self._op_kind = np.zeros(0, dtype=np.int8)     # 0 collective, 1 send, 2 recv
        self._now = 0
        self.op_now = 0     # the latest time seen in op rows
        self._last_detect: int | None = None
        self._detect_every = self.cfg.detect_every_ns
        self.teardown = TeardownGate(self.cfg.evidence_delay_ns)
        self.leaving: set[int] = set()   # ranks whose collectors said their process is exiting
        self._unknown: set[str] = set()
        self._unknown_count = 0
        self._unmatched: set[str] = set()   # groups whose send/recv rows carry no peer
        self._detected_records = -1
        self._links_owed = False    # the connections' judgement put off by one pass
        self.records = 0
        self.dropped = 0
        self.inverted = 0   # op rows that ended before they were entered
        self.progress = ProgressBoard(self.arena)
        self.linkstats = LinkStatFeed(self.conns)
        # state -> detectors -> findings -> the one reporter -> reports
        self.state = JobState(self.cfg, self.arena, self.placement, self.clock, self.timing,
                              self.conns, self.progress, self.ports, self.pg_names,
                              self.op_names, self.leaving)
        self.hangs = HangReports(self.state, self.reporter, self.localizer, self.teardown)
        self.stalls = StallsAfterTheFact(self.state, self.reporter)
        self.slow_reports = SlowReports(self.state, self.reporter, self.hangs.error_ranks)
        self.lossy = LossyLinks(self.cfg, self.localizer, self.placement, self.reporter)
        self.timing.pace = self.progress.period
        self.timing.transfer = lambda g: self.conns.transfer_ns(
            np.asarray(self.arena.pg_of, dtype=np.int64)[g]) if len(g) else np.zeros(0)

    def reset(self) -> None:
        """Forget every record and report: as new, with the same topology and config."""
        self.__init__(self.topology, self.cfg)  # type: ignore[misc]

    def set_topology(self, topology: TopologyLike | None) -> None:
        """Localize on another topology from now on (the daemon's assembly of a job's
        discovered hosts with its fabric): placement, paths and ports follow it; the records
        kept stay. Ranks must be added again to be placed on it."""
        self.topology = topology
        self.placement.set_topology(topology)
        self.localizer.set_paths(PathCache(topology) if topology is not None else None,
                                 self.conns)
        self.ports.topology = topology

    @property
    def now_ns(self) -> int:
        """The latest time seen in the data."""
        return self._now

    # ----- registration -----------------------------------------------------------------------
    def add_rank(self, rank: int, host: str, gpu: str | None = None,
                 nic: str | None = None, local_rank: int | None = None) -> None:
        self.placement.add(int(rank), host, gpu, nic, local_rank)

    def add_group(self, pg: str, ranks: Sequence[int]) -> None:
        pid = self._pg_id(pg)
        g = self.arena.add_group(pid, pg, np.asarray(list(ranks), dtype=np.int64))
        self._pg_group[pid] = g

    def _pg_id(self, name: str) -> int:
        pid = self._pg_ids.get(name)
        if pid is None:
            pid = self._pg_ids[name] = len(self.pg_names)
            self.pg_names.append(name)
            if pid >= len(self._pg_group):
                # grown by doubling: a batch of a million new names stays linear
                grown = np.full(max(64, 2 * len(self._pg_group)), -1, dtype=np.int64)
                grown[: len(self._pg_group)] = self._pg_group
                self._pg_group = grown
        return pid

    def _op_id(self, name: str) -> int:
        oid = self._op_ids.get(name)
        if oid is None:
            oid = self._op_ids[name] = len(self.op_names)
            self.op_names.append(name)
            key = op_key(name)
            if oid >= len(self._op_kind):
                grown = np.zeros(max(16, 2 * len(self._op_kind)), dtype=np.int8)
                grown[: len(self._op_kind)] = self._op_kind
                self._op_kind = grown
            self._op_kind[oid] = 1 if key in SEND_OPS else 2 if key in RECV_OPS else 0
        return oid

    # ----- telemetry --------------------------------------------------------------------------
    def add_ops(self, cols: Columns) -> None:
        n = len(cols)
        if n == 0:
            return
        cuts = self._slot_cuts(cols)
        if cuts:
            for lo, hi in zip([0, *cuts], [*cuts, n], strict=True):
                part = np.zeros(n, dtype=bool)
                part[lo:hi] = True
                self._add_ops(take(cols, part))
            return
        self._add_ops(cols)

    def _slot_cuts(self, cols: Columns) -> list[int]:
        """See ``arena.slot_cuts``: a collective's rows keyed by its communicator, a send's or
        a receive's by its communicator and both ends (its seq counts that channel's calls)."""
        seq = cols["seq"].astype(np.int64)
        if int(seq.max(initial=0)) - int(seq.min(initial=0)) < self.arena.W:
            return []
        pg = cols["pg"].astype(np.int64)
        peer = cols["peer"].astype(np.int64)
        rank = np.where(peer >= 0, cols["rank"].astype(np.int64), -1)
        span = int(max(rank.max(initial=0), peer.max(initial=0))) + 2
        return slot_cuts((pg * span + rank + 1) * span + peer + 1, seq, self.arena.W)

    def _add_ops(self, cols: Columns) -> None:
        n = len(cols)
        self.records += n
        strings = cols.strings
        if not strings:
            self.dropped += n
            log.warning("op batch without a string table (pg and op names): ignored")
            return
        c = cols.columns
        pg_map = self._names(strings, c["pg"], self._pg_ids, self._pg_id)
        op_map = self._names(strings, c["op"], self._op_ids, self._op_id)
        rank = c["rank"].astype(np.int64)
        pg = pg_map[c["pg"]]
        op = op_map[c["op"]]
        seq = c["seq"].astype(np.int64)
        enter = c["t_enter_ns"].astype(np.int64)
        end = c["t_end_ns"].astype(np.int64)
        # typed loosely: the rows are filtered below with the other (int64) columns at once
        status: np.ndarray = c["status"].astype(np.int8)
        peer = c["peer"].astype(np.int64)
        nbytes = c["nbytes"].astype(np.int64)
        self._straighten(rank, enter, end)
        self._now = max(self._now, int(enter.max()), int(end.max()))
        self.op_now = max(self.op_now, int(enter.max()), int(end.max()))
        self.clock.heard(rank, np.maximum(enter, end))
        kind = self._op_kind[op]
        g = self._pg_group[pg].copy()
        lone = (kind > 0) & (peer < 0)
        if lone.any():
            peer = peer.copy()
            peer[lone] = self._implied_peers(g[lone], rank[lone])
            unmatched = lone & (peer < 0) & (g >= 0)
            self._warn_unmatched(pg[unmatched])
            g[lone & (peer < 0)] = -1   # dropped below, once their time inside is counted
        else:
            unmatched = lone
        p2p = (kind > 0) & (peer >= 0)
        pos = np.full(n, -1, dtype=np.int64)
        if p2p.any():
            src = np.where(kind == 1, rank, peer)[p2p]
            dst = np.where(kind == 1, peer, rank)[p2p]
            g[p2p] = self.arena.channels(pg[p2p], src, dst, self.pg_names)
            pos[p2p] = np.where(kind[p2p] == 1, 0, 1)
        coll = ~p2p & (g >= 0)
        if coll.any():
            pos[coll] = self.arena.positions(g[coll], rank[coll])
        ok = (g >= 0) & (pos >= 0) & (seq >= 0)
        # a rank inside a call it cannot be matched in is not computing: its own time stops
        done = (ok | unmatched) & (end >= 0)
        if unmatched.any():
            self.clock.entered_unmatched(rank[unmatched & ~done], enter[unmatched & ~done])
        own = np.full(n, -1, dtype=np.int64)
        if done.any():
            own[done] = self.clock.stamp(rank[done], enter[done], end[done], pg[done], op[done],
                                         seq[done])
        if not ok.all():
            self._drop(~ok, pg, g)
            keep = np.flatnonzero(ok)
            rank, pg, op, seq, enter, end, status, nbytes, g, pos, own = (
                a[keep] for a in (rank, pg, op, seq, enter, end, status, nbytes, g, pos, own))
        self.stalls.check(rank, g, seq, op, enter, end, status)
        finished = self.arena.ingest(g, pos, seq, op, nbytes, enter, end, status, own)
        if len(finished):
            for fin in self.arena.read(finished):
                # a call the stream left out shows only some members' rows (an error, last
                # words) beside cells from progress records: nothing to learn timing from
                kept = fin if self.sample == 1 else fin.take(self._sampled(fin.group, fin.seq))
                if len(kept.slots):
                    self.timing.update(kept)
                    if self.sample == 1:
                        self._slow_update(kept)
                    else:
                        self.stragglers.update(kept)
                bad = np.flatnonzero((fin.status > 0).any(axis=1))
                for i in bad.tolist():
                    self.hangs.error(self.hangs.as_stuck(fin, i), self._now)

    def _slow_update(self, fin: Finished) -> None:
        """Feed the slow-rank detector, judging in between where a communicator's ring would
        otherwise take more new samples than half its length: the start of a slowdown must
        still be in the ring, with samples after it, when it is judged (a trace read in large
        blocks, a fast job between two passes), or the report's onset would be when the
        evidence became enough rather than when the slowdown began."""
        half = max(self.cfg.history // 2, 1)
        n = fin.enter.shape[1]
        while len(fin.slots):
            ug, first, inv = np.unique(fin.group, return_index=True, return_inverse=True)
            room = half - self.slow.unjudged(ug, n)
            room[self.arena.p2p[ug]] = len(fin.slots)   # (channels give no samples)
            occ = np.arange(len(fin.group)) - first[inv]    # (sorted by communicator, seq)
            fits = occ < room[inv]
            if fits.all():
                self.slow.update(fin)
                return
            if fits.any():
                piece = fin.take(fits)
                self.slow.update(piece)
                fin = fin.take(~fits)
                now = int(piece.end.max())
            else:
                now = int(fin.enter.min())
            self.slow_reports.noncomm(self.slow.judge(), max(now, 0), self.sample,
                                      confirm=False)

    @staticmethod
    def _names(strings: list[str], column: np.ndarray, known: dict[str, int],
               intern: Callable[[str], int]) -> np.ndarray:
        """Ids of the strings a column uses (-1 for the rest of the batch's table: a table of
        a million names that no row uses costs nothing)."""
        out = np.full(len(strings), -1, dtype=np.int64)
        used = distinct(column)
        used = used[(used >= 0) & (used < len(strings))]
        # the names seen before looked up at once in ``known`` (``intern``'s table): only new
        # ones take a Python call
        names = [strings[i] for i in used.tolist()]
        ids = list(map(known.get, names))
        out[used] = [intern(n) if i is None else i for n, i in zip(names, ids, strict=True)]
        return out

    def _implied_peers(self, g: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """The other end of send/recv rows that carry no ``peer``: the other member of a
        two-rank communicator, else -1 (``seq`` counts per pair, so in a larger one the calls of
        different pairs cannot be told apart)."""
        ug, inv = distinct_inverse(g)
        pairs = np.full((len(ug), 2), -1, dtype=np.int64)
        for i, x in enumerate(ug.tolist()):
            if x >= 0 and self.arena.n[x] == 2:
                pairs[i] = self.arena.members[x]
        a, b = pairs[inv, 0], pairs[inv, 1]
        return np.where(rank == a, b, np.where(rank == b, a, -1))

    def _warn_unmatched(self, pg: np.ndarray) -> None:
        names = [self.pg_names[p] for p in np.unique(pg).tolist()]
        if names and not self._unmatched:
            log.warning("send/recv records of group %r (and of any other group of more than two "
                        "ranks) carry no peer, which only a two-rank group implies: their calls "
                        "cannot be matched across ranks and count only as time spent in a call "
                        "(write `peer` on send/recv op records)", names[0])
        self._unmatched.update(names)

    def _drop(self, bad: np.ndarray, pg: np.ndarray, g: np.ndarray) -> None:
        self.dropped += int(bad.sum())
        names = [self.pg_names[p] for p in np.unique(pg[bad & (g < 0)]).tolist()]
        new = [n for n in names if n not in self._unmatched and n not in self._unknown]
        if not new:
            return
        # one line for the first such group, then one per tenfold more: a batch naming a million
        # unknown groups must not write a million lines
        before = self._unknown_count
        self._unknown_count += len(new)
        if len(self._unknown) < _NAMES_REMEMBERED:
            self._unknown.update(new[: _NAMES_REMEMBERED - len(self._unknown)])
        if before == 0 or len(str(self._unknown_count)) > len(str(before)):
            log.warning("records of group %r (%d groups so far) arrived before its group record; "
                        "they are ignored (send group records first)", new[0],
                        self._unknown_count)

    def _straighten(self, rank: np.ndarray, enter: np.ndarray, end: np.ndarray) -> None:
        """A call cannot end before it was entered (a collector's clock stepped back, or an
        exporter swapped fields). Such a row still shows that its rank arrived and left, so it
        is kept, entered when it ended, rather than dropped into a false hang."""
        inverted = (end >= 0) & (end < enter)
        if not inverted.any():
            return
        if not self.inverted:
            log.warning("op records that end before they were entered (t_end_ns < t_enter_ns) "
                        "are read as entered when they ended; check the clock of the collector "
                        "that wrote them (first: rank %d)", int(rank[inverted][0]))
        self.inverted += int(inverted.sum())
        enter[inverted] = end[inverted]

    def heard(self, ranks: Sequence[int] | np.ndarray, t_ns: int | np.ndarray,
              leaving: bool = False) -> None:
        """Signs of life outside op records, such as a collector's periodic stats frame: a frozen
        rank's stop while a rank blocked by it inside the same call goes on, and a job whose
        ranks are all gone (a stop) from one whose ranks hang alive. ``t_ns``: one time for
        all, or one per rank."""
        r = np.asarray(ranks, dtype=np.int64).ravel()
        if len(r):
            t = np.asarray(t_ns, dtype=np.int64)
            self.clock.heard(r, np.broadcast_to(t, r.shape).copy())
        if leaving:  # the rank's collector said its process is exiting (SIGTERM or exit)
            self.leaving.update(r.tolist())

    def add_conns(self, conns: ConnRecords | Columns, sampled: bool = False) -> None:
        """Transfers (trace ``conn`` records), or with ``sampled`` the intervals between two
        samples of a socket's counters, whose durations time the network only when they carry
        the call they belong to."""
        if isinstance(conns, Columns):
            conns = ConnRecords.from_columns(conns)
        if len(conns) == 0:
            return
        self.records += len(conns)
        pg_map = np.r_[self._names(conns.strings, conns.pg, self._pg_ids, self._pg_id), -1]
        pg_ids = pg_map[conns.pg]
        self._now = max(self._now, int(conns.t_start_ns.max()), int(conns.t_end_ns.max()))
        self.conns.add(conns, pg_ids, sampled)
        self.lossy.add(conns)

    def set_sample(self, k: int, pg: str | None = None, from_seq: int = 0) -> None:
        """The stream keeps only the calls that ``c4.proto.sampling`` keeps at factor ``k``
        (trace ``meta.sample``; 1: every call): of every communicator, or with ``pg`` of that
        one from its call ``from_seq`` on (a live job's factor changes at a call announced
        ahead, the same on every member)."""
        if pg is None:
            self.set_schedule(k, {})
        else:
            self._put_step(pg, from_seq, k)
            self._in_force()

    def set_schedule(self, default: int, steps: dict[str, list[tuple[int, int]]]) -> None:
        """A live job's whole schedule at once: its default factor, then each communicator's
        ``(from_seq, k)`` steps (thousands of communicators at 16k ranks)."""
        if int(default) < 1:
            raise ValueError(f"sampling factor must be at least 1, got {default!r}")
        self._sample_at.clear()
        self._default_sample = int(default)
        for pg, v in steps.items():
            for from_seq, k in v:
                self._put_step(pg, from_seq, k)
        self._in_force()

    def set_window(self, window_ns: int) -> None:
        """The live job's progress and linkstat window (0: the default). A connection's
        statistics come once per window, so the slow detectors judge at most twice per
        window: at 100k+ ranks one judgement of every series takes seconds that applying
        the job's records needs (a lengthened window is the daemon falling behind)."""
        self._detect_every = max(self.cfg.detect_every_ns, int(window_ns) // 2)

    def _put_step(self, pg: str, from_seq: int, k: int) -> None:
        if int(k) < 1:
            raise ValueError(f"sampling factor must be at least 1, got {k!r}")
        steps = [s for s in self._sample_at.get(pg, []) if s[0] < int(from_seq)]
        self._sample_at[pg] = [*steps, (int(from_seq), int(k))]

    def _in_force(self) -> None:
        # the largest factor now in force (a communicator whose factor fell back to 1 no
        # longer counts; one that sampled before keeps the sampled detectors on)
        self.sample = max([self._default_sample]
                          + [steps[-1][1] for steps in self._sample_at.values() if steps])
        self.timing.max_gap = 8 * self.sample
        self.stragglers.sample = self.stragglers.pace.sample = self.sample

    def _prefix(self, g: int) -> int:
        """The crc32 prefix state of communicator or channel ``g``'s name (cached)."""
        state = self._prefixes.get(g)
        if state is None:
            state = self._prefixes[g] = prefix_state(self.pg_names[self.arena.pg_of[g]])
        return state

    def _sampled(self, g: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """Whether each (communicator or channel, seq) is a call the stream keeps."""
        if not self._sample_at and len(seq) and int(seq.min()) >= 0:
            # one crc32 prefix per communicator, the digits of every seq at once in numpy: a
            # Python step per call cost ~1 s of a 4,096-GPU trace's analysis
            uniq, inv = distinct_inverse(g)
            states = np.fromiter((self._prefix(x) for x in uniq.tolist()), np.uint32, len(uniq))
            return sampled_after(states[inv], seq, self._default_sample)
        names = [self.pg_names[self.arena.pg_of[x]] for x in g.tolist()]
        out = np.empty(len(names), dtype=bool)
        for i, (name, s) in enumerate(zip(names, seq.tolist(), strict=True)):
            k = self._default_sample
            for start, kk in self._sample_at.get(name, []):
                if s >= start:
                    k = kk
            out[i] = is_sampled(name, s, k)
        return out

    def add_progress(self, recs: ProgressRecords, fill_open: bool = False) -> None:
        """How far ranks have got on their communicators (version 2 ``progress``): signs of
        life, and with sampled calls what the hang detectors stand on (see ``progress``).

        ``fill_open``: the stream's op rows hold completed calls only (NCCL's Inspector writes
        an operation once it has finished, RAS counts launches): the calls members are inside
        are written from progress, as for sampled streams, whatever the sampling factor."""
        n = len(recs)
        if n == 0:
            return
        self.records += n
        self._now = max(self._now, int(recs.t_ns.max()))
        self.clock.heard(recs.rank, recs.t_ns)
        pg = self._names(recs.strings, recs.pg, self._pg_ids, self._pg_id)[recs.pg]
        op_map = np.r_[self._names(recs.strings, recs.op, self._op_ids, self._op_id), -1]
        op = op_map[recs.op]
        kind = np.zeros(n, dtype=np.int8)
        kind[op >= 0] = self._op_kind[op[op >= 0]]
        rank, peer = recs.rank, recs.peer.copy()
        g = self._pg_group[pg].copy()
        p2p = (kind > 0) | (peer >= 0)
        lone = p2p & (peer < 0)
        if lone.any():
            peer[lone] = self._implied_peers(g[lone], rank[lone])
        # a peer without a direction: the op names it, else the row cannot be placed
        p2p_ok = p2p & (peer >= 0) & (kind > 0)
        pos = np.full(n, -1, dtype=np.int64)
        if p2p_ok.any():
            src = np.where(kind == 1, rank, peer)[p2p_ok]
            dst = np.where(kind == 1, peer, rank)[p2p_ok]
            g[p2p_ok] = self.arena.channels(pg[p2p_ok], src, dst, self.pg_names)
            pos[p2p_ok] = np.where(kind[p2p_ok] == 1, 0, 1)
        coll = ~p2p & (g >= 0)
        if coll.any():
            pos[coll] = self.arena.positions(g[coll], rank[coll])
        ok = (g >= 0) & (pos >= 0)
        if not ok.all():
            self._drop(~ok & ~p2p, pg, g)
            self.dropped += int((~ok & p2p).sum())
        if not ok.any():
            return
        g, pos = g[ok], pos[ok]
        self.progress.update(g, pos, recs.entered[ok], recs.completed[ok], recs.t_ns[ok])
        if self.sample > 1:
            self.stragglers.waits.update(g, pos, recs.entered[ok], recs.completed[ok],
                                         recs.t_ns[ok])
        if fill_open:
            self.progress.write(*self.progress.pending(g, pos))
        elif self.sample > 1:
            pg_, seq = self.progress.pending(g, pos)
            self.progress.write(pg_, seq, self._sampled(pg_, seq))

    def add_linkstats(self, recs: LinkStatRecords) -> None:
        """Per-connection window statistics (version 2 ``linkstat``), which stand for the
        connection's transfer records (see ``linkstats``)."""
        if len(recs) == 0:
            return
        self.records += len(recs)
        self._now = max(self._now, int(recs.t_ns.max()))
        pg_map = np.r_[self._names(recs.strings, recs.pg, self._pg_ids, self._pg_id), -1]
        samples = self.linkstats.add(recs, pg_map[recs.pg])
        if samples is not None:
            self.lossy.add(samples)

    def add_ports(self, recs: PortRecords) -> None:
        """NIC port states and counters (version 2 ``port``), which weigh the suspects of
        stuck transfers (see ``ports``)."""
        if len(recs) == 0:
            return
        self.records += len(recs)
        self.ports.add(recs)

    # ----- detection --------------------------------------------------------------------------
    def advance(self, now_ns: int, unapplied_ns: int = 0,
                delivery: Delivery | None = None) -> list[FaultReport]:
        """Judge what was added up to ``now_ns``. ``unapplied_ns``: how long records the caller
        holds have waited to be added (a daemon behind its stream): a rank's silence is judged
        up to when they arrived, since its records may be among them. ``delivery``: which
        sidecar carries each rank and how far its deliveries came (see ``hang_reports``)."""
        now = int(now_ns)
        self.hangs.unapplied_ns = int(unapplied_ns)
        self.hangs.delivery = delivery
        self._hangs(now)
        if (self._last_detect is None or now - self._last_detect >= self._detect_every) \
                and self.records != self._detected_records:
            self._last_detect = now
            self._detected_records = self.records
            conns = self.conns if self.conns.total else None
            if self._detect_every > self.cfg.detect_every_ns \
                    and self.localizer.conns_stale(conns):
                # a lengthened window (a job of 100k+ ranks): judging the ranks and a window
                # of half a million connections in one pass held every record that arrived
                # meanwhile for both; the connections are judged at the next pass
                self._slow_ranks(now)
                self._links_owed = True
            else:
                self._slow(now)
        elif self._links_owed:
            self._slow_links(now)
        return self.reporter.changed()

    def finish(self, end_ns: int | None = None) -> list[FaultReport]:
        now = int(end_ns) if end_ns is not None else self._now
        self._hangs(now, final=True)
        self._slow(now)
        self.reporter.changed()
        return [r for r in self.reporter.all() if r.state == "open"]

    def incidents(self) -> list[FaultReport]:
        """Every fault the trace showed so far: the open ones and those that cleared (each
        from its first to its last time seen), oldest first; withdrawn reports left out."""
        return self.reporter.incidents()

    def open_calls(self) -> int:
        """Calls that some member entered and that have not finished."""
        return len(self.arena.open_slots())

    def reports(self) -> list[FaultReport]:
        return self.reporter.all()

    def _hangs(self, now: int, final: bool = False) -> None:
        self.hangs.scan(now, self.op_now)
        waits = awaited(self.arena) if self.teardown.holds_silence() else set()
        for finding in self.teardown.settle(self.clock.seen[: self.clock.size], now, final,
                                            waits):
            self.reporter.file(finding, now)

    def _comm_min_span(self) -> int:
        """How long a slowdown must last to be a fault: ``comm_min_span_ns``, or as many
        iterations as ``comm_min_rounds`` when they take less (floored)."""
        cfg = self.cfg
        rounds = cfg.comm_min_rounds * self.timing.iteration_ns()
        if rounds <= 0:
            return cfg.comm_min_span_ns
        return min(cfg.comm_min_span_ns, max(rounds, cfg.comm_min_span_low_ns))

    def _slow(self, now: int) -> None:
        self._slow_ranks(now)
        self._slow_links(now)

    def _slow_ranks(self, now: int) -> None:
        self.slow_reports.noncomm(self.slow.judge() if self.sample == 1
                                  else self.stragglers.judge(), now, self.sample)

    def _slow_links(self, now: int) -> None:
        self._links_owed = False
        findings = self.localizer.comm_slow(self.conns if self.conns.total else None,
                                            self.timing.xfer, self.timing.xkey_group,
                                            self._comm_min_span())
        self.slow_reports.comm(findings, now)
        self.lossy.update(now)
