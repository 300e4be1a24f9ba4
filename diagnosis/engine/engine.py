"""The detection engine: feed it ranks, groups, op and connection records (from a trace or live
telemetry), call ``advance`` with the data's clock, get fault reports.

Memory is bounded: each communicator keeps its last ``window`` calls, each member and connection
its last ``history`` samples, so the engine can run for ever and a trace streams through it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from diagnosis.engine.arena import Arena, Finished
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.hangs import Stuck, chain, error_culprits, scan_open
from diagnosis.engine.localize import CommFinding, Localizer
from diagnosis.engine.owntime import OwnClock
from diagnosis.engine.placement import Placement
from diagnosis.engine.records import ConnRecords
from diagnosis.engine.registry import Registry
from diagnosis.engine.slow import NoncommSlow, SlowRank
from diagnosis.engine.teardown import TeardownGate
from diagnosis.engine.timing import GroupTiming
from diagnosis.engine.tomography import PathCache
from diagnosis.report import FaultReport, Suspect
from proto.codec import STATUS_NAMES, Columns

log = logging.getLogger(__name__)

SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms" if ns < 10e9 else f"{ns / 1e9:.0f} s"


class Engine:
    def __init__(self, topology: Any = None, config: EngineConfig | None = None) -> None:
        self.cfg = config or EngineConfig()
        self.topology = topology
        self.placement = Placement(topology)
        self.arena = Arena(self.cfg.window)
        self.clock = OwnClock()
        self.timing = GroupTiming(self.arena, self.cfg)
        self.slow = NoncommSlow(self.arena, self.cfg)
        self.conns = ConnWindow(self.arena, self.cfg)
        paths = PathCache(topology) if topology is not None else None
        self.localizer = Localizer(self.arena, self.placement, paths, self.cfg)
        self.registry = Registry()
        self.pg_names: list[str] = []
        self._pg_ids: dict[str, int] = {}
        self._pg_group = np.zeros(0, dtype=np.int64)
        self.op_names: list[str] = []
        self._op_ids: dict[str, int] = {}
        self._op_kind = np.zeros(0, dtype=np.int8)     # 0 collective, 1 send, 2 recv
        self._now = 0
        self._last_detect: int | None = None
        self._error_ranks: set[int] = set()
        self.teardown = TeardownGate()
        self._unknown: set[str] = set()
        self._comm_hang_memo: tuple[Any, Any] | None = None
        self._detected_records = -1
        self.records = 0
        self.dropped = 0

    @property
    def now_ns(self) -> int:
        """The latest time seen in the data."""
        return self._now

    # ----- registration -----------------------------------------------------------------------
    def add_rank(self, rank: int, host: str, gpu: str | None = None,
                 nic: str | None = None) -> None:
        self.placement.add(int(rank), host, gpu, nic)

    def add_group(self, pg: str, ranks: Sequence[int]) -> None:
        pid = self._pg_id(pg)
        g = self.arena.add_group(pid, pg, np.asarray(list(ranks), dtype=np.int64))
        self._pg_group[pid] = g

    def _pg_id(self, name: str) -> int:
        pid = self._pg_ids.get(name)
        if pid is None:
            pid = self._pg_ids[name] = len(self.pg_names)
            self.pg_names.append(name)
            self._pg_group = np.r_[self._pg_group, -1]
        return pid

    def _op_id(self, name: str) -> int:
        oid = self._op_ids.get(name)
        if oid is None:
            oid = self._op_ids[name] = len(self.op_names)
            self.op_names.append(name)
            kind = 1 if name in SEND_OPS else 2 if name in RECV_OPS else 0
            self._op_kind = np.r_[self._op_kind, np.int8(kind)]
        return oid

    # ----- telemetry --------------------------------------------------------------------------
    def add_ops(self, cols: Columns) -> None:
        n = len(cols)
        if n == 0:
            return
        self.records += n
        strings = cols.strings
        if not strings:
            self.dropped += n
            log.warning("op batch without a string table (pg and op names): ignored")
            return
        pg_map = np.array([self._pg_id(s) for s in strings], dtype=np.int64)
        op_map = np.array([self._op_id(s) for s in strings], dtype=np.int64)
        c = cols.columns
        rank = c["rank"].astype(np.int64)
        pg = pg_map[c["pg"]]
        op = op_map[c["op"]]
        seq = c["seq"].astype(np.int64)
        enter = c["t_enter_ns"].astype(np.int64)
        end = c["t_end_ns"].astype(np.int64)
        status = c["status"].astype(np.int8)
        peer = c["peer"].astype(np.int64)
        nbytes = c["nbytes"].astype(np.int64)
        self._now = max(self._now, int(enter.max()), int(end.max()))
        self.clock.heard(rank, np.maximum(enter, end))
        kind = self._op_kind[op]
        p2p = (kind > 0) & (peer >= 0)
        g = self._pg_group[pg].copy()
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
        if not ok.all():
            self._drop(~ok, pg, g)
            keep = np.flatnonzero(ok)
            rank, pg, op, seq, enter, end, status, nbytes, g, pos = (
                a[keep] for a in (rank, pg, op, seq, enter, end, status, nbytes, g, pos))
        own = np.full(len(rank), -1, dtype=np.int64)
        done = end >= 0
        if done.any():
            own[done] = self.clock.stamp(rank[done], enter[done], end[done], pg[done], op[done],
                                         seq[done])
        finished = self.arena.ingest(g, pos, seq, op, nbytes, enter, end, status, own)
        if len(finished):
            for fin in self.arena.read(finished):
                self.timing.update(fin)
                self.slow.update(fin)
                bad = np.flatnonzero((fin.status > 0).any(axis=1))
                for i in bad.tolist():
                    self._report_error(self._as_stuck(fin, i), self._now)

    def _drop(self, bad: np.ndarray, pg: np.ndarray, g: np.ndarray) -> None:
        self.dropped += int(bad.sum())
        for p in np.unique(pg[bad & (g < 0)]).tolist():
            name = self.pg_names[p]
            if name not in self._unknown:
                self._unknown.add(name)
                log.warning("op records of group %r arrived before its group record; they are "
                            "ignored (send group records first)", name)

    def add_conns(self, conns: ConnRecords | Columns) -> None:
        if isinstance(conns, Columns):
            conns = ConnRecords.from_columns(conns)
        if len(conns) == 0:
            return
        self.records += len(conns)
        pg_map = np.array([self._pg_id(s) for s in conns.strings] + [-1], dtype=np.int64)
        pg_ids = np.where(conns.pg >= 0, pg_map[conns.pg], -1)
        self._now = max(self._now, int(conns.t_start_ns.max()), int(conns.t_end_ns.max()))
        self.conns.add(conns, pg_ids)

    # ----- detection --------------------------------------------------------------------------
    def advance(self, now_ns: int) -> list[FaultReport]:
        now = int(now_ns)
        self._hangs(now)
        if (self._last_detect is None or now - self._last_detect >= self.cfg.detect_every_ns) \
                and self.records != self._detected_records:
            self._last_detect = now
            self._detected_records = self.records
            self._slow(now)
        return self.registry.changed()

    def finish(self, end_ns: int | None = None) -> list[FaultReport]:
        now = int(end_ns) if end_ns is not None else self._now
        self._hangs(now, final=True)
        self._slow(now)
        self.registry.changed()
        return [r for r in self.registry.all() if r.state == "open"]

    def reports(self) -> list[FaultReport]:
        return self.registry.all()

    # ----- hangs and errors -------------------------------------------------------------------
    @staticmethod
    def _as_stuck(fin: Finished, i: int) -> Stuck:
        g = int(fin.group[i])
        return Stuck(int(fin.slots[i]), g, int(fin.seq[i]), -1, int(fin.enter[i].min()),
                     int(fin.enter[i].max()), 0, np.asarray([], dtype=np.int64),
                     fin.enter[i], fin.end[i], fin.status[i])

    def _report_error(self, inst: Stuck, now: int) -> None:
        if len(inst.ranks) == 0:
            inst.ranks = self.arena.members[inst.group]
        culprits, how = error_culprits(inst)
        fresh = [r for r in culprits if r not in self._error_ranks]
        if not fresh:
            return
        self._error_ranks.update(culprits)
        name = self._group_label(inst.group)
        statuses = sorted({STATUS_NAMES[s] for s in inst.status.tolist() if s > 0})
        who = self.placement.describe_many(culprits)
        first = int(inst.end[inst.end >= 0].min()) if (inst.end >= 0).any() else inst.first
        summary = (f"{who} {how} in {name} #{inst.seq} ({'/'.join(statuses)}); "
                   f"check {'its' if len(culprits) == 1 else 'their'} logs and restart "
                   f"{'it' if len(culprits) == 1 else 'them'}")
        report = FaultReport(
            "error", tuple(self.placement.suspects(culprits, [0.95] * len(culprits))),
            first, summary, pg=self.pg_names[self.arena.pg_of[inst.group]], seq=inst.seq,
            evidence={"group": name, "status": statuses, "culprits": culprits,
                      "members": len(inst.enter)},
            id="error:" + ",".join(map(str, culprits[:8])))
        fail = inst.end[(inst.status > 0) & (inst.end >= 0)]
        t = int(fail.min()) if len(fail) else first
        blocked = bool(((inst.enter >= 0) & (inst.end < 0) & (inst.status <= 0)).any())
        self.teardown.hold(report, t, self._grace(inst.group), culprits, blocked)

    def _grace(self, g: int) -> int:
        return int(self.timing.bound(np.asarray([g], dtype=np.int64))[0])

    def _group_label(self, g: int) -> str:
        name = self.arena.names[g]
        return f"{name}" if not self.arena.p2p[g] else f"send/recv {name}"

    def _hangs(self, now: int, final: bool = False) -> None:
        self._hang_scan(now)
        for report in self.teardown.settle(self.clock.seen[: self.clock.size], now, final):
            self.registry.put(report, now)

    def _hang_scan(self, now: int) -> None:
        scan = scan_open(self.arena, self.timing.bound, now)
        for inst in scan.failed:
            self._report_error(inst, now)
        active: set[str] = set()
        cands = [s for s in scan.stuck if len(s.absent) and len(s.waiting)]
        gone = [s for s in scan.stuck if len(s.absent) and not len(s.waiting)]
        entered = [s for s in scan.stuck if not len(s.absent) and len(s.waiting)
                   and now - s.last > s.bound]
        # everyone entered and nothing finishes: the transfer; some members got out: a member
        # stopped inside the call (the transfer would hold everyone)
        comm = [s for s in entered if not (s.end >= 0).any()]
        partial = [s for s in entered if (s.end >= 0).any()]
        roots: dict[int, Stuck] = {}
        for s in sorted(cands, key=lambda s: s.first):
            for r in s.absent.tolist():
                if r not in scan.waiting and r not in self._error_ranks:
                    roots.setdefault(r, s)
        # (a chain through a failed rank is explained by its error)
        silent = None if roots or comm or self._error_ranks \
            else self._silent_first(cands, partial)
        if roots:
            active.add(self._report_noncomm_hang(roots, cands, scan.waiting, now))
        elif silent is not None:
            # every absent rank waits elsewhere (or all entered and some got out): the chain's
            # rank silent longest stopped first, and everyone else waits for it
            r, ranks = silent
            s0 = min(cands + partial, key=lambda s: s.first)
            where = next((c for c in sorted(cands, key=lambda c: c.first)
                          if r in c.absent.tolist()), s0)
            active.add(self._report_noncomm_hang({r: where}, cands or partial, scan.waiting, now,
                                                 silent=ranks))
        elif cands and not comm and not self._error_ranks:
            s = min(cands, key=lambda s: s.first)
            active.add(self._report_noncomm_hang({r: s for r in s.absent.tolist()}, cands,
                                                 scan.waiting, now, cycle=True))
        if comm:
            active.add(self._report_comm_hang(comm, now))
        if self.cfg.report_missing:
            for s in gone:
                self._report_missing(s, now)
        for kind in ("noncomm_hang", "comm_hang"):
            for fid in self.registry.open_ids(kind):
                if fid not in active:
                    self.registry.resolve(fid, now, "the waiting call finished")

    def _silent_first(self, cands: list[Stuck],
                      partial: list[Stuck]) -> tuple[int, list[int]] | None:
        """The rank of the waiting chain heard from least recently, and the chain by silence."""
        start = {r for c in cands for r in c.absent.tolist()} \
            | {r for c in partial for r in c.waiting.tolist()}
        if not start:
            return None
        c = self.clock
        ranks = [r for r in chain(self.arena, sorted(start))
                 if r not in self._error_ranks and r < c.size and c.seen[r] >= 0]
        if not ranks:
            return None
        ranks.sort(key=lambda r: (int(c.seen[r]), r))
        return ranks[0], ranks

    def _describe_last(self, r: int) -> str:
        c = self.clock
        if r >= c.size or c.last_pg[r] < 0:
            return "no call at all"
        return (f"{self.op_names[c.last_op[r]]} #{int(c.last_seq[r])} on "
                f"{self.pg_names[c.last_pg[r]]}")

    def _report_noncomm_hang(self, roots: dict[int, Stuck], cands: list[Stuck],
                             waiting: set[int], now: int, cycle: bool = False,
                             silent: list[int] | None = None) -> str:
        culprits = sorted(roots, key=lambda r: (roots[r].first, r))
        top = roots[culprits[0]]
        fid = None
        for old in self.registry.open_ids("noncomm_hang"):
            prev = set(self.registry.get(old).evidence.get("culprits", []))
            if prev & set(culprits):
                fid = old
                break
        fid = fid or "noncomm_hang:" + ",".join(map(str, culprits[:8]))
        name = self._group_label(top.group)
        op = self.op_names[top.op] if top.op >= 0 else "call"
        if self.arena.p2p[top.group]:
            # the call the absent side owed: the sender's send or the receiver's recv
            op = "send" if culprits[0] == int(self.arena.members[top.group][0]) else "recv"
        who = self.placement.describe_many(culprits)
        last = self._describe_last(culprits[0])
        score = 0.95 if not cycle else 0.5
        if cycle:
            summary = (f"{who} and the ranks waiting for them wait on each other (no rank is "
                       f"free); {op} #{top.seq} on {name} has waited {_ms(now - top.first)}: "
                       "check for mismatched collectives")
        else:
            summary = (f"{who} never entered {op} #{top.seq} on {name}, which "
                       f"{len(top.waiting)} ranks have waited in for {_ms(now - top.first)}; "
                       f"{'it' if len(culprits) == 1 else 'the first'} last completed {last}: "
                       f"inspect {'its' if len(culprits) == 1 else 'their'} process (stack, GPU)")
            if silent:
                quiet_ms = (int(self.clock.seen[silent[1]]) - int(self.clock.seen[silent[0]])) \
                    / 1e6 if len(silent) > 1 else 0.0
                summary = (f"{who} went silent first ({quiet_ms:.0f} ms before the next of the "
                           f"{len(silent)} ranks that wait for it, directly or through others); "
                           f"{op} #{top.seq} on {name} has waited {_ms(now - top.first)}; "
                           f"it last completed {last}: inspect its process (stack, GPU)")
        evidence = {
            "culprits": culprits,
            "last_completed": {str(r): self._describe_last(r) for r in culprits[:16]},
            "blocked_ranks": len(waiting),
            "stuck_calls": [{"group": self._group_label(s.group), "seq": s.seq,
                             "absent": s.absent.tolist()[:16], "waiting": len(s.waiting),
                             "waited_ms": round((now - s.first) / 1e6, 1)}
                            for s in sorted(cands, key=lambda s: s.first)[:8]],
            "bound_ms": round(top.bound / 1e6, 1),
        }
        # the hang began when the culprit went quiet: not before its last call ended, nor
        # before anyone started waiting for it
        c0 = culprits[0]
        quiet = int(self.clock.last_end[c0]) if c0 < self.clock.size else -1
        suspects = self.placement.suspects(culprits, [(0.85 if silent else score)]
                                           * len(culprits))
        if silent:
            evidence["chain_by_silence"] = silent[:16]
        report = FaultReport("noncomm_hang", tuple(suspects),
                             max(top.first, quiet), summary,
                             pg=self.pg_names[self.arena.pg_of[top.group]], seq=top.seq,
                             evidence=evidence, id=fid)
        self.registry.put(report, now)
        return fid

    def _report_comm_hang(self, stuck: list[Stuck], now: int) -> str:
        stuck = sorted(stuck, key=lambda s: s.last)
        s = stuck[0]
        bound = min(x.bound for x in stuck)
        keys = self.localizer.stuck_transfers(self.conns, now, bound // 4)
        groups = [x.group for x in stuck]
        # the same stuck calls and transfers localize the same way: reuse while nothing moved
        memo = (tuple(keys), tuple(groups), s.last)
        if self._comm_hang_memo is not None and self._comm_hang_memo[0] == memo:
            suspects, how = self._comm_hang_memo[1]
        else:
            suspects, how = self.localizer.comm_hang(self.conns if keys else None, groups, keys,
                                                     min(x.first for x in stuck),
                                                     self.timing.last_end)
            self._comm_hang_memo = (memo, (suspects, how))
        pg = self.arena.pg_of[s.group]
        name = self._group_label(s.group)
        op = self.op_names[s.op] if s.op >= 0 else "call"
        top = suspects[0] if suspects else None
        where = f"{top.type} {top.id}" if top else "an unknown component"
        others = f" (and {len(stuck) - 1} more stuck calls)" if len(stuck) > 1 else ""
        summary = (f"every member of {name} entered {op} #{s.seq}{others} but it has not "
                   f"finished for {_ms(now - s.last)} ({how}); check {where}")
        fid = None
        for old in self.registry.open_ids("comm_hang"):
            fid = old          # one communication hang at a time: later evidence refines it
        fid = fid or (f"comm_hang:{top.type}:{top.id}" if top else f"comm_hang:{name}:{s.seq}")
        evidence = {"group": name, "seq": s.seq, "waited_ms": round((now - s.last) / 1e6, 1),
                    "bound_ms": round(s.bound / 1e6, 1),
                    "stuck_calls": [f"{self._group_label(x.group)} #{x.seq}" for x in stuck[:16]],
                    "stuck_transfers": [f"{self.conns.src[k]}>{self.conns.dst[k]}"
                                        for k in keys[:16]]}
        report = FaultReport("comm_hang", tuple(suspects), s.last, summary,
                             pg=self.pg_names[pg], seq=s.seq, evidence=evidence, id=fid)
        self.registry.put(report, now)
        return fid

    def _report_missing(self, s: Stuck, now: int) -> None:
        absent = [r for r in s.absent.tolist() if r not in self._error_ranks]
        if not absent:
            return
        self._error_ranks.update(absent)
        name = self._group_label(s.group)
        who = self.placement.describe_many(absent)
        summary = (f"{who} stopped reporting: its peers completed {name} #{s.seq} "
                   f"{_ms(now - s.first)} ago without a record from it; check its collector "
                   "and process")
        report = FaultReport("error", tuple(self.placement.suspects(absent, [0.9] * len(absent))),
                             s.first, summary, pg=self.pg_names[self.arena.pg_of[s.group]],
                             seq=s.seq, evidence={"group": name, "culprits": absent,
                                                  "stopped_reporting": True},
                             id="error:" + ",".join(map(str, absent[:8])))
        heard = self.clock.seen[np.asarray(absent, dtype=np.int64)] \
            if max(absent) < self.clock.size else np.asarray([-1])
        quiet = int(heard.max()) if (heard >= 0).all() else s.first
        self.teardown.hold(report, quiet, self._grace(s.group), absent, blocked=False)

    # ----- slow -------------------------------------------------------------------------------
    def _slow(self, now: int) -> None:
        self._report_noncomm_slow(self.slow.judge(), now)
        findings = self.localizer.comm_slow(self.conns if self.conns.total else None,
                                            self.timing.xfer, self.timing.xkey_group)
        self._report_comm_slow(findings, now)

    def _report_noncomm_slow(self, found: list[SlowRank], now: int) -> None:
        best: dict[int, SlowRank] = {}
        for s in found:
            if s.rank in self._error_ranks:
                continue
            cur = best.get(s.rank)
            if cur is None or (s.frac, s.samples) > (cur.frac, cur.samples):
                best[s.rank] = s
        by_host: dict[str | None, list[int]] = {}
        for r in best:
            by_host.setdefault(self.placement.host(r), []).append(r)
        strong = np.log(self.cfg.slow_alpha)
        for host, ranks in by_host.items():
            members = self.placement.ranks_of_host(host) if host else []
            pooled = sum(best[r].logp for r in ranks)
            if host and len(ranks) >= 2 and len(members) >= 2 and pooled < strong and \
                    len(ranks) >= self.cfg.host_fraction * len(members):
                self._slow_host(host, sorted(ranks), best, now)
            else:
                for r in ranks:
                    if best[r].logp < strong:
                        self._slow_rank(best[r], now)

    def _slow_rank(self, s: SlowRank, now: int) -> None:
        fid = f"noncomm_slow:rank:{s.rank}"
        host = self.placement.host(s.rank)
        hid = f"noncomm_slow:host:{host}"
        if host and self.registry.get(hid) is not None:
            return
        name = self.arena.names[s.group]
        summary = (f"{self.placement.describe(s.rank)} spends {_ms(s.excess_ns)} "
                   f"({100 * s.excess:.0f}%) longer than its {name} peers outside collectives and "
                   f"arrives late in {100 * s.frac:.0f}% of {s.samples} calls: check that GPU "
                   "(clocks, thermals, ECC) or its host's load")
        report = FaultReport("noncomm_slow", (self.placement.suspect(s.rank, s.frac),),
                             s.onset_ns, summary, pg=self.pg_names[self.arena.pg_of[s.group]],
                             evidence=self._slow_evidence(s), id=fid)
        self.registry.put(report, now)

    def _slow_host(self, host: str, ranks: list[int], best: dict[int, SlowRank],
                   now: int) -> None:
        fid = f"noncomm_slow:host:{host}"
        rows = [best[r] for r in ranks]
        excess = float(np.median([s.excess for s in rows]))
        excess_ns = float(np.median([s.excess_ns for s in rows]))
        frac = float(np.median([s.frac for s in rows]))
        onset = min(s.onset_ns for s in rows)
        summary = (f"every GPU of host {host} ({len(ranks)} ranks) spends {_ms(excess_ns)} "
                   f"({100 * excess:.0f}%) longer than its peers outside collectives: check the "
                   "host (CPU, memory, PCIe, power)")
        suspects = [Suspect("host", host, frac)] + [self.placement.suspect(r, frac / 2)
                                                    for r in ranks[:2]]
        report = FaultReport("noncomm_slow", tuple(suspects), onset, summary,
                             pg=self.pg_names[self.arena.pg_of[rows[0].group]],
                             evidence={"ranks": ranks, **self._slow_evidence(rows[0])}, id=fid)
        self.registry.put(report, now)
        for r in ranks:
            self.registry.resolve(f"noncomm_slow:rank:{r}", now, f"part of slow host {host}")

    def _slow_evidence(self, s: SlowRank) -> dict[str, Any]:
        return {"group": self.arena.names[s.group], "median_excess": round(s.excess, 4),
                "median_excess_ms": round(s.excess_ns / 1e6, 3), "samples": s.samples,
                "late_fraction": round(s.frac, 3), "noise_sigma": round(s.sigma, 4)}

    def _report_comm_slow(self, findings: list[CommFinding], now: int) -> None:
        current: set[str] = set()
        for f in findings:
            comps = f.explanation.components
            suspects = []
            for c in comps:
                if c.type == "rank":
                    suspects.append(self.placement.suspect(int(c.id), f.explanation.score))
                else:
                    suspects.append(Suspect(c.type, c.id, min(max(f.explanation.score, 0), 1)))
            top = suspects[0]
            fid = f"comm_slow:{top.type}:{top.id}"
            names = " and ".join(f"{s.type} {s.id}" for s in suspects[:3])
            summary = (f"{len(f.observations)} {f.via} through {names} transfer "
                       f"{f.slowdown:.1f}x slower than their baseline while "
                       f"{f.healthy} others are normal: check {names}")
            evidence = {"slow": f.observations[:32], "slow_count": len(f.observations),
                        "slowdown": round(f.slowdown, 3), "healthy": f.healthy,
                        "cleared_by": f.explanation.cleared_by, "via": f.via}
            for old in self.registry.open_ids("comm_slow"):
                prev = self.registry.get(old)
                if old != fid and set(prev.evidence.get("slow", [])) & set(f.observations):
                    self.registry.resolve(old, now, f"superseded by {fid}")
            self.registry.put(FaultReport("comm_slow", tuple(suspects), f.onset_ns, summary,
                                          evidence=evidence, id=fid), now)
            current.add(fid)
        # slowness that went away was transient (congestion by other traffic): withdraw it; an
        # intermittent fault comes back and re-opens its report
        for old in self.registry.open_ids("comm_slow"):
            if old not in current:
                self.registry.resolve(old, now, "the connections are back to their baseline")
