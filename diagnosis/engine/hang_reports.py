"""Reports of hangs and errors: turns what ``hangs.scan_open`` finds open (and failed calls) into
``noncomm_hang``, ``comm_hang`` and ``error`` reports, following wait chains to the culprit and
localizing stuck transfers (see ``hangs`` for the rules)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from c4.proto.codec import STATUS_NAMES
from c4.report import Suspect
from diagnosis.engine.arena import Finished
from diagnosis.engine.hangs import (
    Stuck,
    chain,
    error_culprits,
    is_symmetric,
    scan_open,
    stalled_at_once,
)
from diagnosis.engine.localize import UNPLACED, Localizer
from diagnosis.engine.reporter import Finding, Reporter
from diagnosis.engine.state import JobState
from diagnosis.engine.teardown import TeardownGate, stopped_together
from diagnosis.engine.wording import group_words, ms

_ERRORS_KEPT = 4096     # failed instances remembered (their culprits may change as rows arrive)
# A sidecar that delivered nothing at all for this long (while still connected) is taken to be
# gone: its ranks' silence is judged on their own. Sidecars send every second.
CHANNEL_GONE_NS = 30_000_000_000


@dataclass(frozen=True)
class Delivery:
    """Per rank (index), what the daemon knows of the sidecar that carries its records: the
    newest record time it delivered, and how long ago its last delivery came (ns; -1 for a
    rank whose sidecar is not known)."""

    until_ns: np.ndarray
    quiet_ns: np.ndarray


class HangReports:
    """Turns what the hang scan finds open (and failed calls) into hang and error findings for
    the reporter, holding errors that may be a teardown at ``teardown``, and says which of its
    open ones ended."""

    def __init__(self, state: JobState, reporter: Reporter, localizer: Localizer,
                 teardown: TeardownGate) -> None:
        self.state = state
        self.cfg, self.arena, self.clock = state.cfg, state.arena, state.clock
        self.timing, self.conns, self.placement = state.timing, state.conns, state.placement
        self.ports, self.progress = state.ports, state.progress
        self.pg_names, self.op_names = state.pg_names, state.op_names
        self.leaving = state.leaving
        self.reporter, self.localizer, self.teardown = reporter, localizer, teardown
        self._op_now = 0     # the latest time seen in op rows (as of the last scan)
        #: ranks that error reports blame (what the slow reports leave to them)
        self.error_ranks: set[int] = set()
        # the last comm hang localized: (stuck transfers, groups, last entry) -> (suspects, how)
        self._comm_hang_memo: tuple[tuple[tuple[int, ...], tuple[int, ...], int],
                                    tuple[list[Suspect], str]] | None = None
        self._errors: dict[tuple[int, int], str] = {}    # failed instance -> its error's id
        self._claims: dict[str, set[int]] = {}           # error id -> its culprits
        self._failed: dict[int, int] = {}                # rank -> entry of its latest failed call
        self._missing: dict[str, int] = {}   # error ids of ranks that stopped reporting -> when
        self._timed_out: set[str] = set()  # hangs that ended in failed calls: kept open
        self._hang_group: dict[str, int] = {}   # open noncomm_hang id -> its stuck group
        self._sym = np.zeros(0, dtype=bool)
        self._stopped = False           # the whole job went silent at once (see teardown)
        # per rank: its last time heard as of the previous scan, and the scan time at which
        # that last moved (the engine's clock: when its signs of life last arrived)
        self._seen_was = np.zeros(0, dtype=np.int64)
        self._moved_at = np.zeros(0, dtype=np.int64)
        self.unapplied_ns = 0     # age of records the caller holds but has not added yet
        self.delivery: Delivery | None = None

    def as_stuck(self, fin: Finished, i: int) -> Stuck:
        g = int(fin.group[i])
        op = int(self.arena.s_op[int(fin.slots[i])])
        return Stuck(int(fin.slots[i]), g, int(fin.seq[i]), op, int(fin.enter[i].min()),
                     int(fin.enter[i].max()), 0, np.asarray([], dtype=np.int64),
                     fin.enter[i], fin.end[i], fin.status[i])

    def error(self, inst: Stuck, now: int) -> None:
        if len(inst.ranks) == 0:
            inst.ranks = self.arena.members[inst.group]
        for r, e in zip(inst.ranks[inst.status > 0].tolist(),
                        inst.enter[inst.status > 0].tolist(), strict=True):
            self._failed[r] = max(self._failed.get(r, -1), e)
        culprits, how = error_culprits(inst)
        if how == "never entered it":
            # a member that failed a call of its own stopped there: a victim of that error
            victims = self.explained() - self.error_ranks
            culprits = [r for r in culprits if r not in victims]
        key = (inst.group, inst.seq)
        old = self._errors.get(key)
        if culprits and how in ("never entered it", "timed out") and self._waited_past_bound(inst):
            if old is not None:
                del self._errors[key]
                self._withdraw(old, now, "superseded: its members failed only after waiting "
                               "past the hang bound (a hang that timed out)")
            self._report_timed_out(inst, culprits, now)
            return
        if not culprits:
            if old is not None:
                del self._errors[key]
                self._withdraw(old, now, "explained by other errors")
            return
        if old is not None:
            if self._claims.get(old) == set(culprits):
                return
            # a member's rows arrived since (it was late to report, not absent): the culprits
            # change, and the report that named it is withdrawn
            self._withdraw(old, now, "superseded: rows that arrived later changed the culprits")
        elif all(r in self.error_ranks for r in culprits):
            return
        name = self.label(inst.group)
        statuses = sorted({STATUS_NAMES[s] for s in inst.status.tolist() if s > 0})
        who = self.placement.describe_many(culprits)
        first = int(inst.end[inst.end >= 0].min()) if (inst.end >= 0).any() else inst.first
        op = self.op_names[inst.op] if 0 <= inst.op < len(self.op_names) else "call"
        summary = (f"{who} {how} in {op} #{inst.seq} on {name} ({'/'.join(statuses)}); "
                   f"check {'its' if len(culprits) == 1 else 'their'} logs and restart "
                   f"{'it' if len(culprits) == 1 else 'them'}")
        report = Finding(
            "error", "error:" + ",".join(map(str, culprits[:8])),
            tuple(self.placement.suspects(culprits, [0.95] * len(culprits))),
            first, summary, pg=self.pg_names[self.arena.pg_of[inst.group]], seq=inst.seq,
            evidence={"group": name, "status": statuses, "culprits": culprits,
                      "members": len(inst.enter)}, culprits=tuple(culprits))
        self._claim(report.key, culprits)
        self._errors[key] = report.key
        while len(self._errors) > _ERRORS_KEPT:
            del self._errors[next(iter(self._errors))]
        fail = inst.end[(inst.status > 0) & (inst.end >= 0)]
        t = int(fail.min()) if len(fail) else first
        blocked = bool(((inst.enter >= 0) & (inst.end < 0) & (inst.status <= 0)).any())
        self.teardown.hold(report, t, self._grace(inst.group), culprits, blocked,
                           replaces=old)

    def _waited_past_bound(self, inst: Stuck) -> bool:
        """Members left the call only by failing, after waiting longer than its hang bound (a
        collective timeout, such as NCCL's watchdog): the call hung before it failed."""
        failed = (inst.status > 0) & (inst.end >= 0) & (inst.enter >= 0)
        if not failed.any():
            return False
        waited = int((inst.end[failed] - inst.enter[failed]).max())
        return waited > self._grace(inst.group)

    def _report_timed_out(self, inst: Stuck, culprits: list[int], now: int) -> None:
        """A hang that ended in failed calls: a member never came (``noncomm_hang``) or every
        member entered and the transfer never finished (``comm_hang``). Filed at once, not
        taken for a teardown (a stop fails calls as soon as it strikes, not after the hang
        bound), and kept open: no later call of the job resolves it."""
        name = self.label(inst.group)
        op = self.op_names[inst.op] if 0 <= inst.op < len(self.op_names) else "call"
        failed = (inst.status > 0) & (inst.end >= 0) & (inst.enter >= 0)
        waited = int(np.median(inst.end[failed] - inst.enter[failed]))
        statuses = "/".join(sorted({STATUS_NAMES[x] for x in inst.status.tolist() if x > 0}))
        absent = inst.absent.tolist()
        if absent:
            # (an open hang that blames one of them is this incident: the reporter files it
            # there)
            fid = "noncomm_hang:" + ",".join(map(str, culprits[:8]))
            who = self.placement.describe_many(culprits)
            last = self._describe_last(culprits[0])
            summary = (f"{who} never entered {op} #{inst.seq} on {name}; the "
                       f"{int(failed.sum())} ranks that did waited {ms(waited)} and failed "
                       f"({statuses}); {'it' if len(culprits) == 1 else 'the first'} last "
                       f"completed {last}: inspect {'its' if len(culprits) == 1 else 'their'} "
                       "process (stack, GPU)")
            c0 = culprits[0]
            quiet = int(self.clock.last_end[c0]) if c0 < self.clock.size else -1
            report = Finding(
                "noncomm_hang", fid,
                tuple(self.placement.suspects(culprits, [0.95] * len(culprits))),
                max(int(inst.first), quiet), summary,
                pg=self.pg_names[self.arena.pg_of[inst.group]], seq=inst.seq,
                evidence={"culprits": culprits, "timed_out": True, "status": statuses,
                          "waited_ms": round(waited / 1e6, 1),
                          "last_completed": {str(r): self._describe_last(r)
                                             for r in culprits[:16]}},
                culprits=tuple(culprits), timed_out=True)
        else:
            keys = self.localizer.stuck_transfers(self.conns, now, 0)
            since = inst.last + self.timing.settle(inst.group)
            suspects, how = self._ported(*self.localizer.comm_hang(
                self.conns if keys else None, [inst.group], keys, since, self.timing.last_end))
            fid = next(iter(self.reporter.open_ids("comm_hang")), None) or \
                f"comm_hang:{name}:{inst.seq}"
            summary = (f"every member of {name} entered {op} #{inst.seq}, waited {ms(waited)} "
                       f"and failed ({statuses}) ({how}); check "
                       + (f"{suspects[0].type} {suspects[0].id}" if suspects else "the transfer"))
            report = Finding("comm_hang", fid, tuple(suspects), int(inst.last), summary,
                             pg=self.pg_names[self.arena.pg_of[inst.group]], seq=inst.seq,
                             evidence={"group": name, "seq": inst.seq, "timed_out": True,
                                       "status": statuses,
                                       "waited_ms": round(waited / 1e6, 1)}, timed_out=True)
        self._timed_out.add(self.reporter.file(report, now, renew=True))

    def _ported(self, suspects: list, how: str) -> tuple[list, str]:
        """A hang's suspects reordered by what their NIC ports showed (see ``ports``); none
        where nothing places the hang (``UNPLACED``) and the ports showed nothing either."""
        out, note = self.ports.weigh(list(suspects))
        if how == UNPLACED and not note:
            out = []
        return out, f"{how}; {note}" if note else how

    def _claim(self, fid: str, ranks: list[int]) -> None:
        self._claims[fid] = set(ranks)
        self.error_ranks.update(ranks)

    def _withdraw(self, fid: str, now: int, why: str) -> None:
        """Drop an error report (held or filed) whose culprits turned out wrong."""
        self._claims.pop(fid, None)
        self.error_ranks.clear()
        self.error_ranks.update(*self._claims.values())
        if not self.teardown.withdraw(fid):
            self.reporter.resolve(fid, now, why)

    def explained(self) -> set[int]:
        """Ranks an error accounts for: the culprits of error reports, and ranks whose latest
        call failed (a victim of an error stops there; it does not cause a hang)."""
        c = self.clock
        # (a rank that only stopped reporting is no error's victim: it may be a hang's culprit)
        out = {r for fid, ranks in self._claims.items() if fid not in self._missing
               for r in ranks}
        for r, e in self._failed.items():
            if r < c.size and e >= c.last_enter[r]:
                out.add(r)
        return out

    def _file(self, report: Finding, now: int) -> str:
        """File a hang report (a new incident if an earlier one of that id was resolved);
        returns its id. If the whole job stopped at once (see ``teardown``) and the report is
        new, it waits until a rank is heard again."""
        cur = self.reporter.get(report.key)
        if self._stopped and (cur is None or cur.state != "open"):
            self.teardown.hold_hang(report)
            return report.key
        return self.reporter.file(report, now, renew=True)

    def _all_leaving(self, seen: np.ndarray) -> bool:
        """Every rank heard from said it is exiting: the job was stopped (or ended), whatever
        calls its ranks were in."""
        heard = np.flatnonzero(seen >= 0)
        return len(heard) > 0 and set(heard.tolist()) <= self.leaving

    def _symmetric(self) -> np.ndarray:
        if len(self._sym) != len(self.op_names):
            self._sym = np.asarray([is_symmetric(o) for o in self.op_names], dtype=bool)
        return self._sym

    def _grace(self, g: int) -> int:
        return int(self.timing.bound(np.asarray([g], dtype=np.int64))[0])

    def label(self, g: int) -> str:
        return self.state.label(g)

    def scan(self, now: int, op_now: int) -> None:
        """Judge the calls open at ``now``; ``op_now``: the latest time seen in op rows."""
        self._op_now = op_now
        scan = scan_open(self.arena, self.timing.bound, now, self._symmetric(),
                         self.timing.tail_bound, self.timing.novel, self.cfg.hang_cold_ns,
                         self._progress_lag(now), self.clock.last_end[: self.clock.size])
        c = self.clock
        unmatched = c.inside_unmatched()
        scan.waiting |= unmatched
        seen = c.seen[: c.size]
        self._note_arrivals(seen, now)
        # (a transfer that began and stopped moving is a stuck transfer, whatever the silence)
        self._stopped = (len(self.conns.open_key) == 0
                         and stopped_together(seen, scan.waiting)
                         and stalled_at_once(self.arena, int(seen.max()))) \
            or self._all_leaving(seen)
        for inst in scan.failed:
            self.error(inst, now)
        active: set[str] = set()
        # a member absent from a call "waits nowhere" only once the rows that would show it
        # inside another call had time to arrive (collectors ship a call pending 0.5 s, then
        # flush; sidecars batch): at the 1 s floor, a rank that had just entered another call
        # was taken for the culprit
        cands = [s for s in scan.stuck if len(s.absent) and len(s.waiting)
                 and now - s.first >= self.cfg.evidence_delay_ns]
        gone = [s for s in scan.stuck if len(s.absent) and not len(s.waiting)]
        entered = [s for s in scan.stuck if not len(s.absent) and len(s.waiting)
                   and now - s.last > s.bound]
        # everyone entered and nothing finishes: the transfer; some members got out: a member
        # stopped inside the call (the transfer would hold everyone)
        # (nobody got out but some members fell silent while the others are heard: a member
        # frozen inside the call holds everyone, as when some got out)
        frozen = [s for s in entered if not (s.end >= 0).any() and self._frozen_inside(s, now)]
        held = {id(s) for s in frozen}
        # a call whose every member also waits in a call that lacks a member is queued behind
        # that call, not stuck itself: NCCL's CPUs launch calls ahead of their streams, and a
        # source that counts launches (RAS) puts a rank inside both
        behind = {r for s in scan.stuck if len(s.absent) for r in s.waiting.tolist()}
        comm = [s for s in entered if id(s) not in held
                and (not (s.end >= 0).any() or self._in_flight(s))
                and not set(s.waiting.tolist()) <= behind]
        partial = frozen + [s for s in entered if (s.end >= 0).any() and not self._in_flight(s)]
        explained = self.explained()
        roots: dict[int, Stuck] = {}
        for s in sorted(cands, key=lambda s: s.first):
            for r in s.absent.tolist():
                if r not in scan.waiting and r not in explained:
                    roots.setdefault(r, s)
        # transfers stuck under calls that cannot be matched (send/recv rows without a peer):
        # the calls waiting for those ranks wait for the transfers
        lost = [] if roots or comm or explained or not unmatched or not cands \
            else self._stuck_unmatched(unmatched, cands, now)
        # (a chain through a failed rank is explained by its error)
        silent = None if roots or comm or explained or lost \
            else self._silent_first(cands, partial, explained)
        if roots:
            active.add(self._report_noncomm_hang(roots, cands, scan.waiting, now))
        elif lost:
            active.add(self._report_stuck_unmatched(lost, now))
        elif silent is not None:
            # every absent rank waits elsewhere (or all entered and some got out): the chain's
            # rank silent longest stopped first, and everyone else waits for it
            r, ranks = silent
            s0 = min(cands + partial, key=lambda s: s.first)
            where = next((c for c in sorted(cands, key=lambda c: c.first)
                          if r in c.absent.tolist()), s0)
            active.add(self._report_noncomm_hang({r: where}, cands or partial, scan.waiting, now,
                                                 silent=ranks))
        elif cands and not comm and not explained:
            s = min(cands, key=lambda s: s.first)
            active.add(self._report_noncomm_hang({r: s for r in s.absent.tolist()}, cands,
                                                 scan.waiting, now, cycle=True))
        if comm:
            active.add(self._report_comm_hang(comm, now))
        if self.cfg.report_missing:
            for s in gone:
                self._report_missing(s, now)
            self._heard_again(now)
        for kind in ("noncomm_hang", "comm_hang"):
            for fid, f in self.reporter.open_findings(kind):
                if fid not in active and fid not in self._timed_out:
                    blamed = set(f.culprits)
                    if blamed & explained:
                        self.reporter.resolve(fid, now, "explained by an error report")
                    else:
                        self.reporter.resolve(fid, now, "the waiting call finished",
                                              cleared=True)
                        g = self._hang_group.pop(fid, None)
                        if g is not None and (filed := self.reporter.get(fid)) is not None:
                            self.timing.stall_cleared(g, filed.first_seen_ns, now)

    def _progress_lag(self, now: int) -> int:
        """How far the progress records lag the op rows (the edge closes a window after its
        end; op rows go out as calls complete): while both flow, the progress a moment shows
        arrives that much later. Once the job stops, the op rows stop too, and the silence of
        progress counts from there."""
        newest = self.progress.newest
        if newest < 0:
            return 0
        return int(min(max(self._op_now - newest, 0), max(now - newest, 0)))

    def _in_flight(self, s: Stuck) -> bool:
        """A call every member entered, that some got out of (a send returns once gloo or TCP
        has its data; a collective's member leaves once it has all it needs) while the others,
        heard from well after the data was due, still wait inside: the data owed to them is
        stuck on the way, not in a rank. (A rank frozen inside the call is not heard from.)"""
        if (s.enter < 0).any() or (s.status > 0).any():
            return False
        out, inside = s.end >= 0, s.end < 0
        if not out.any() or not inside.any():
            return False
        due = int(s.end[out].max()) + self.timing.settle(s.group) + self.cfg.alive_after_ns
        c = self.clock
        return all(r < c.size and int(c.seen[r]) > due for r in s.ranks[inside].tolist())

    def _frozen_inside(self, s: Stuck, now: int) -> bool:
        """Every member entered and none got out, and some members have been silent since
        shortly after the last one entered while the others are heard well after: a process
        stopped inside the call (SIGSTOP, a debugger, a frozen cgroup) and its peers wait for
        its data. Only where each silent rank's host is heard through another rank: a node cut
        off from the daemon falls silent whole, and its ranks are then no proof of a frozen
        process (its link may be the fault)."""
        c = self.clock
        if now - s.last < self.cfg.alive_after_ns + self.cfg.evidence_delay_ns:
            return False
        ranks = s.ranks.tolist()
        if any(r >= c.size for r in ranks):
            return False
        due = s.last + self.timing.settle(s.group) + self.cfg.alive_after_ns
        alive = {r for r in ranks if int(c.seen[r]) > due}
        silent = [r for r in ranks if r not in alive]
        if not alive or not silent:
            return False
        for r in silent:
            host = self.placement.host(r)
            mates = self.placement.ranks_of_host(host) if host is not None else []
            if not any(m != r and m < c.size and int(c.seen[m]) > due for m in mates):
                return False
        return True

    def _silent_first(self, cands: list[Stuck], partial: list[Stuck],
                      explained: set[int]) -> tuple[int, list[int]] | None:
        """The rank of the waiting chain heard from least recently, and the chain by silence."""
        start = {r for c in cands for r in c.absent.tolist()} \
            | {r for c in partial for r in c.waiting.tolist()}
        if not start:
            return None
        c = self.clock
        ranks = [r for r in chain(self.arena, sorted(start))
                 if r not in explained and r < c.size and c.seen[r] >= 0]
        if not ranks:
            return None
        ranks.sort(key=lambda r: (int(c.seen[r]), r))
        return ranks[0], ranks

    def _describe_last(self, r: int) -> str:
        c = self.clock
        if r >= c.size or c.last_pg[r] < 0:
            return "no call at all"
        return (f"{self.op_names[c.last_op[r]]} #{int(c.last_seq[r])} on "
                f"{group_words(self.pg_names[c.last_pg[r]])}")

    def _report_noncomm_hang(self, roots: dict[int, Stuck], cands: list[Stuck],
                             waiting: set[int], now: int, cycle: bool = False,
                             silent: list[int] | None = None) -> str:
        culprits = sorted(roots, key=lambda r: (roots[r].first, r))
        top = roots[culprits[0]]
        # (an open hang that blames one of them is this incident: the reporter files it there)
        fid = "noncomm_hang:" + ",".join(map(str, culprits[:8]))
        name = self.label(top.group)
        op = self.op_names[top.op] if top.op >= 0 else "call"
        if self.arena.p2p[top.group]:
            # the call the absent side owed: the sender's send or the receiver's recv
            op = "send" if culprits[0] == int(self.arena.members[top.group][0]) else "recv"
        who = self.placement.describe_many(culprits)
        last = self._describe_last(culprits[0])
        score = 0.95 if not cycle else 0.5
        if cycle:
            summary = (f"{who} and the ranks waiting for them wait on each other (no rank is "
                       f"free); {op} #{top.seq} on {name} has waited {ms(now - top.first)}: "
                       "check for mismatched collectives")
        else:
            summary = (f"{who} never entered {op} #{top.seq} on {name}, which "
                       f"{len(top.waiting)} ranks have waited in for {ms(now - top.first)}; "
                       f"{'it' if len(culprits) == 1 else 'the first'} last completed {last}: "
                       f"inspect {'its' if len(culprits) == 1 else 'their'} process (stack, GPU)")
            if silent:
                quiet_ms = (int(self.clock.seen[silent[1]]) - int(self.clock.seen[silent[0]])) \
                    / 1e6 if len(silent) > 1 else 0.0
                summary = (f"{who} went silent first ({quiet_ms:.0f} ms before the next of the "
                           f"{len(silent)} ranks that wait for it, directly or through others); "
                           f"{op} #{top.seq} on {name} has waited {ms(now - top.first)}; "
                           f"it last completed {last}: inspect its process (stack, GPU)")
        evidence = {
            "culprits": culprits,
            "last_completed": {str(r): self._describe_last(r) for r in culprits[:16]},
            "blocked_ranks": len(waiting),
            "stuck_calls": [{"group": self.label(s.group), "seq": s.seq,
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
        report = Finding("noncomm_hang", fid, tuple(suspects), max(top.first, quiet), summary,
                         pg=self.pg_names[self.arena.pg_of[top.group]], seq=top.seq,
                         evidence=evidence, culprits=tuple(culprits))
        rid = self._file(report, now)
        # one frozen process is one incident: the silence of a rank this hang blames is the
        # hang's, not an error of its own
        for fid in list(self._missing):
            claimed = self._claims.get(fid, set())
            if claimed and claimed <= set(culprits):
                del self._missing[fid]
                self._withdraw(fid, now, f"the rank(s) hang: see {rid}")
        self._hang_group[rid] = top.group
        while len(self._hang_group) > _ERRORS_KEPT:
            del self._hang_group[next(iter(self._hang_group))]
        return rid

    def _stuck_unmatched(self, unmatched: set[int], cands: list[Stuck], now: int) -> list[int]:
        """Keys of transfers open past a quarter of the waiting calls' bound between ranks that
        wait in calls that cannot be matched."""
        bound = min(s.bound for s in cands)
        keys = self.localizer.stuck_transfers(self.conns, now, bound // 4)
        w = self.conns
        return [k for k in keys if int(w.src[k]) in unmatched or int(w.dst[k]) in unmatched]

    def _report_stuck_unmatched(self, keys: list[int], now: int) -> str:
        w = self.conns
        suspects, how = self._ported(*self.localizer.comm_hang(w, [], keys, now,
                                                               self.timing.last_end))
        sel = np.isin(w.open_key, keys)
        first = int(w.open_start[sel].min())
        pgs = sorted({self.pg_names[int(w.pg[k])] for k in keys if int(w.pg[k]) >= 0})
        top = suspects[0] if suspects else None
        where = _where(suspects)
        names = ", ".join(f"{w.src[k]}>{w.dst[k]}" for k in keys[:4])
        more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
        summary = (f"transfer(s) {names}{more} stopped moving {ms(now - first)} ago under "
                   f"send/recv calls that carry no peer ({how}); check {where}")
        # one communication hang at a time: later evidence refines it
        open_ids = self.reporter.open_ids("comm_hang")
        fid = (open_ids[-1] if open_ids else None) \
            or (f"comm_hang:{top.type}:{top.id}" if top else f"comm_hang:{names}")
        evidence = {"groups": pgs, "stuck_transfers": [f"{w.src[k]}>{w.dst[k]}"
                                                       for k in keys[:16]]}
        report = Finding("comm_hang", fid, tuple(suspects), first, summary,
                         pg=pgs[0] if pgs else None, evidence=evidence)
        return self._file(report, now)

    def _report_comm_hang(self, stuck: list[Stuck], now: int) -> str:
        # (calls queued behind the stuck one began to wait with it: the first entered leads)
        stuck = sorted(stuck, key=lambda s: (s.last, int(s.enter.max())))
        s = stuck[0]
        bound = min(x.bound for x in stuck)
        keys = self.localizer.stuck_transfers(self.conns, now, bound // 4)
        groups = [x.group for x in stuck]
        # the same stuck calls and transfers localize the same way: reuse while nothing moved
        memo = (tuple(keys), tuple(groups), s.last)
        if self._comm_hang_memo is not None and self._comm_hang_memo[0] == memo:
            suspects, how = self._comm_hang_memo[1]
        else:
            # a transfer cannot begin before its call's last member entered, and a component
            # may die while it runs: only traffic that finished after the stuck call would
            # normally have ended proves its path alive
            since = min(x.last + self.timing.settle(x.group) for x in stuck)
            suspects, how = self.localizer.comm_hang(self.conns if keys else None, groups, keys,
                                                     since, self.timing.last_end)
            self._comm_hang_memo = (memo, (suspects, how))
        suspects, how = self._ported(suspects, how)
        pg = self.arena.pg_of[s.group]
        name = self.label(s.group)
        op = self.op_names[s.op] if s.op >= 0 else "call"
        top = suspects[0] if suspects else None
        # no suspect: the hang is certain, its place is not (the localizer says why)
        where = _where(suspects) if suspects else \
            "every member's transport and the network between them"
        others = f" (and {len(stuck) - 1} more stuck calls)" if len(stuck) > 1 else ""
        if self._in_flight(s):
            done = self.placement.describe_many(s.ranks[s.end >= 0].tolist())
            wait = self.placement.describe_many(s.ranks[s.end < 0].tolist())
            summary = (f"{op} #{s.seq} on {name}{others}: {done} got out, {wait} still"
                       f" waits for data that has not arrived for {ms(now - s.last)} ({how}); "
                       f"check {where}")
        else:
            summary = (f"every member of {name} entered {op} #{s.seq}{others} but it has not "
                       f"finished for {ms(now - s.last)} ({how}); check {where}")
        fid = None
        for old in self.reporter.open_ids("comm_hang"):
            fid = old          # one communication hang at a time: later evidence refines it
        fid = fid or (f"comm_hang:{top.type}:{top.id}" if top else f"comm_hang:{name}:{s.seq}")
        evidence = {"group": name, "seq": s.seq, "waited_ms": round((now - s.last) / 1e6, 1),
                    "bound_ms": round(s.bound / 1e6, 1),
                    "stuck_calls": [f"{self.label(x.group)} #{x.seq}" for x in stuck[:16]],
                    "stuck_transfers": [f"{self.conns.src[k]}>{self.conns.dst[k]}"
                                        for k in keys[:16]]}
        report = Finding("comm_hang", fid, tuple(suspects), s.last, summary,
                         pg=self.pg_names[pg], seq=s.seq, evidence=evidence)
        return self._file(report, now)

    def _heard_again(self, now: int) -> None:
        """Withdraw "stopped reporting" for ranks that speak again (a frozen process thawed, a
        collector that reconnected): they were silent, not gone."""
        c = self.clock
        for fid, quiet in list(self._missing.items()):
            ranks = self._claims.get(fid, set())
            if ranks and all(r < c.size and int(c.seen[r]) > quiet for r in ranks):
                del self._missing[fid]
                self._withdraw(fid, now, "the rank(s) report again")

    def _note_arrivals(self, seen: np.ndarray, now: int) -> None:
        n = len(seen)
        if len(self._seen_was) < n:
            grow = n - len(self._seen_was)
            self._seen_was = np.concatenate([self._seen_was, np.full(grow, -1, np.int64)])
            self._moved_at = np.concatenate([self._moved_at, np.full(grow, now, np.int64)])
        moved = seen > self._seen_was[:n]
        self._moved_at[:n][moved] = now
        self._seen_was[:n] = seen

    def _unheard_since(self, ranks: list[int], done: int, now: int, wait: int) -> list[int]:
        """Those of ``ranks`` not heard from since ``done`` that stopped reporting rather than
        being late: a host-mate (whose records travel through the same sidecar) was heard from
        after ``done``; where the caller says which sidecar carries the rank (``delivery``), that
        sidecar delivered records from after ``done`` or nothing at all for long; else nothing
        new from the rank itself has arrived for ``wait``. A sidecar
        whose stream lags its peers' (its outbox draining after a push-back) delivers its
        ranks' records late but steadily: their peers' calls finish without them meanwhile,
        and that is no silence."""
        c = self.clock
        host_heard: dict[str | None, int] = {}
        out = []
        for r in ranks:
            if r >= c.size:
                out.append(r)          # never heard at all
                continue
            if int(c.seen[r]) > done:
                continue
            host = self.placement.host(r)
            if host not in host_heard:
                mates = [m for m in self.placement.ranks_of_host(host) if m < c.size] \
                    if host is not None else []
                host_heard[host] = int(c.seen[mates].max()) if mates else -1
            if host_heard[host] > done:
                out.append(r)
            elif (d := self.delivery) is not None and r < len(d.until_ns) and d.until_ns[r] >= 0:
                # its sidecar delivered records from well after the call (the rank's would
                # have come with them), or has stopped delivering at all
                if int(d.until_ns[r]) > done + self.cfg.evidence_delay_ns \
                        or int(d.quiet_ns[r]) - self.unapplied_ns > max(wait, CHANNEL_GONE_NS):
                    out.append(r)
            # (records waiting in the caller's queue may be the rank's: its silence counts
            # up to when they arrived)
            elif now - self.unapplied_ns - int(self._moved_at[r]) > wait:
                out.append(r)
        return out

    def _report_missing(self, s: Stuck, now: int) -> None:
        done = int(s.end.max())
        wait = max(s.bound, self.cfg.evidence_delay_ns)
        # (a rank heard from after its peers finished the call has not stopped reporting)
        # (nor is a rank an open hang blames: its silence is that hang's)
        hung = {r for _, f in self.reporter.open_findings("noncomm_hang") for r in f.culprits}
        absent = self._unheard_since([r for r in s.absent.tolist()
                                      if r not in self.error_ranks and r not in hung],
                                     done, now, wait)
        if not absent:
            return
        name = self.label(s.group)
        who = self.placement.describe_many(absent)
        op = self.op_names[s.op] if 0 <= s.op < len(self.op_names) else "call"
        summary = (f"{who} stopped reporting: its peers completed {op} #{s.seq} on {name} "
                   f"{ms(now - s.first)} ago without a record from it; check its collector "
                   "and process")
        report = Finding("error", "error:" + ",".join(map(str, absent[:8])),
                         tuple(self.placement.suspects(absent, [0.9] * len(absent))),
                         s.first, summary, pg=self.pg_names[self.arena.pg_of[s.group]],
                         seq=s.seq, evidence={"group": name, "culprits": absent,
                                              "stopped_reporting": True},
                         culprits=tuple(absent), stopped_reporting=True)
        self._claim(report.key, absent)
        heard = self.clock.seen[np.asarray(absent, dtype=np.int64)] \
            if max(absent) < self.clock.size else np.asarray([-1])
        quiet = int(heard.max()) if (heard >= 0).all() else s.first
        self._missing[report.key] = quiet
        self.teardown.hold(report, quiet, self._grace(s.group), absent, blocked=False)


def _where(suspects: Sequence[Suspect]) -> str:
    """What to check: the top suspect, and how many others explain the hang as well (more than
    a NIC and its cable: naming the first alone would single it out)."""
    if not suspects:
        return "an unknown component"
    top = suspects[0]
    ties = sum(1 for x in suspects if x.score >= top.score)
    more = f" or any of the {ties - 1} others that explain it as well" if ties > 2 else ""
    return f"{top.type} {top.id}{more}"
