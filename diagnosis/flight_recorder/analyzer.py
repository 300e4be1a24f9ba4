"""Find hangs, mismatched calls and failed calls in a job's Flight Recorder dumps.

Collectives are matched across ranks by (process group, collective sequence id); sends and
receives by group, pair and order (p2p.py). The dumps are taken to be of a job in trouble
(Flight Recorder dumps on a timeout): calls still open are calls the ranks are stuck in.

* **noncomm_hang**: some members are inside a call that others never reached (or, with NCCL
  timing on, enqueued but whose GPU never began it). A missing rank that is itself waiting in
  another call for someone else is a victim; the chain is followed to the ranks that wait on
  nobody, and those are the culprits.
* **error** (mismatch): members recorded different calls, sizes or dtypes at the same call;
  the minority are the culprits (mismatch.py).
* **comm_hang**: every member entered a call (or both ends a transfer) and it never completed
  (NCCL: states move to started and completed; gloo never leaves ``scheduled``, so a finished
  call looks like a stuck one and none is reported there).
* **error** (state): entries marked failed or timed out by the backend.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from c4.report import FaultReport, Suspect
from diagnosis.flight_recorder import comm
from diagnosis.flight_recorder.calls import CallTable, Key, Stall, first_ns, order
from diagnosis.flight_recorder.dumps import RankDump, load_dumps
from diagnosis.flight_recorder.groups import peer_ranks
from diagnosis.flight_recorder.mismatch import mismatches, p2p_mismatch_reports
from diagnosis.flight_recorder.p2p import match_p2p
from diagnosis.flight_recorder.parse import FrEntry
from diagnosis.flight_recorder.text import ranks, verb

log = logging.getLogger(__name__)

# Calls that can finish on one rank before the others are done (the root of a broadcast
# hands its data on and leaves); every other collective finishes only when all took part.
ROOTED_OPS = frozenset({"broadcast", "_broadcast_oop", "reduce", "_reduce_oop", "gather",
                        "scatter"})

CULPRIT_SCORE = 0.9
UNDUMPED_CULPRIT_SCORE = 0.8
VICTIM_SCORE = 0.3


def analyze_dumps(path: Path, prefix: str | None = None) -> list[FaultReport]:
    """Fault reports for the Flight Recorder dumps in directory ``path`` (one file per rank).

    Raises:
        DiagnosisError: ``path`` holds no dumps, or several sets that ``prefix`` must choose from.
        FormatError: a dump is malformed or truncated (the message names the file and field).
    """
    return analyze(load_dumps(Path(path), prefix))


def analyze(dumps: Sequence[RankDump]) -> list[FaultReport]:
    """Fault reports for already loaded dumps: hangs, mismatches, stuck transfers, failures."""
    job = _Job(CallTable(dumps))
    hangs = job.hangs()  # first: it sets aside the stalls that only wait behind a comm hang
    return [*hangs, *job.mismatch_reports, *job.comm_hangs(), *comm.state_errors(job.t)]


class _Job:
    def __init__(self, table: CallTable) -> None:
        self.t = table
        self.m = table.membership
        self.mismatch_reports, self.mismatched = mismatches(table)
        p2p = match_p2p(table)
        self.unmatched_p2p = p2p.unmatched
        self.mismatch_reports += p2p_mismatch_reports(table, p2p.mismatches)
        self.pending_p2p = [p for p in p2p.pending
                            if not any(x.send is p.send for x in p2p.mismatches)]
        self.open_calls: dict[str, Key] = {}  # per group: earliest call all members are in
        stalls = self._collective_stalls() + p2p.stalls
        self.stalls: dict[tuple, Stall] = {s.key: s for s in stalls}
        self.inferred = self._infer_hidden_stalls()
        self.all_stalls = {**self.inferred, **self.stalls}
        self.blocked = self._blocked_at()
        self.comm = comm.find(table, self.open_calls, self.pending_p2p, self.blocked,
                              self.all_stalls)
        # Ranks inside a call every member entered and none finished: they wait on the transfer,
        # so a later call they never reached is its consequence, not their fault.
        self.in_comm = {r: h for h in self.comm for r in h.ranks}
        self.behind_comm: dict[str, list[Stall]] = defaultdict(list)
        log.info("%d dumps, %d groups, %d calls: %d stalled (%d guessed), %d stuck transfers, "
                 "%d mismatches; no dump from ranks %s", len(table.dumps), len(self.m.members),
                 len(table.calls), len(self.stalls), len(self.inferred), len(self.comm),
                 len(self.mismatch_reports), sorted(self.m.undumped) or "none")

    # -- stalls ---------------------------------------------------------------------------------

    def _collective_stalls(self) -> list[Stall]:
        out: list[Stall] = []
        stalled: set[str] = set()
        for key, by_rank in sorted(self.t.calls.items()):
            pg, seq = key
            tracking = self.t.tracks_state(pg)
            states = {r: self.t.state(r, key) for r in by_rank}
            waiting = {r for r, s in states.items() if not tracking or s != "completed"}
            if not waiting:
                continue
            if tracking and "completed" in states.values() and _op(by_rank) not in ROOTED_OPS:
                # Done somewhere, so every member took part: the dumps of the others were
                # taken before they saw it finish (or, for the missing, before they issued it).
                continue
            when = first_ns(by_rank, waiting)
            missing = {r for r in self.m.of(pg) - by_rank.keys()
                       if self.t.absent(r, key, waiting, when)}
            label = f"{_op(by_rank)} #{seq} on {self.m.label(pg)}"
            if missing:
                stalled.add(pg)
                out.append(Stall(key=key, pg=pg, seq=seq, op=_op(by_rank),
                                 waiting=frozenset(waiting), missing=frozenset(missing),
                                 first_ns=when, order=order(by_rank, waiting), label=label))
                continue
            if not tracking or key in self.mismatched:
                continue
            late = {r for r in waiting if self.t.never_started(r, states[r])}
            inside = {r for r in waiting if states[r] == "started"}
            if late and inside:
                stalled.add(pg)
                out.append(Stall(key=key, pg=pg, seq=seq, op=_op(by_rank),
                                 waiting=frozenset(inside), missing=frozenset(late),
                                 first_ns=first_ns(by_rank, inside),
                                 order=order(by_rank, inside), label=label,
                                 reason="never_started"))
            elif (self.m.is_complete(pg) or len(by_rank) > 1) and not (
                    pg in self.open_calls or pg in stalled):
                # later calls on the group queue behind its first open or stalled one
                self.open_calls[pg] = key
        return out

    def _infer_hidden_stalls(self) -> dict[tuple, Stall]:
        """Waits the matching alone does not show, for ranks that never joined a stall.

        Such a rank may itself be stuck in its last call: a collective on a group whose other
        members we cannot see (gloo leaves pg_config empty, and a rank that never calls on a
        group leaves no trace of belonging to it), or a send/recv whose other half could not be
        matched. The ranks missing elsewhere that are not known members of that group are its
        likely absentees.
        """
        absent = set().union(*(s.missing for s in self.stalls.values())) if self.stalls else set()
        known_blocked = {r for s in self.stalls.values() for r in s.waiting}
        out: dict[tuple, Stall] = {}
        for r in sorted(absent - known_blocked):
            d = self.t.dumps.get(r)
            if d is None or not d.entries:
                continue
            last = d.entries[-1]
            if last.is_p2p:
                wait = self._p2p_wait(r, last)
                if wait is not None:
                    out[wait.key] = wait
                continue
            key = (self.t.group(last), last.seq)
            pg = key[0]
            if (self.t.state(r, key) == "completed" or key in self.stalls
                    or self.m.is_complete(pg)):
                continue
            candidates = frozenset(absent - self.m.of(pg))
            if not candidates:
                continue
            by_rank = self.t.calls[key]
            prev = out.get(key)
            out[key] = Stall(key=key, pg=pg, seq=last.seq, op=_op(by_rank),
                             waiting=(prev.waiting if prev else frozenset()) | {r},
                             missing=candidates, first_ns=first_ns(by_rank, [r]),
                             order={**(prev.order if prev else {}), r: last.index},
                             inferred=True, label=f"{_op(by_rank)} #{last.seq} on "
                             f"{self.m.label(pg)}")
        return out

    def _p2p_wait(self, rank: int, e: FrEntry) -> Stall | None:
        """Rank ``rank`` blocked in an unmatched send/recv ``e``: a wait on its peer."""
        state = self.t.p2p_state(e)
        pair = peer_ranks(e.peer)
        if state == "completed" or pair is None or (rank, e.index) not in self.unmatched_p2p:
            return None
        g = self.t.group(e)
        src, dst = (self.m.global_rank(g, x) for x in pair)
        peer = dst if e.op == "send" else src
        if peer is None or peer == rank:
            return None
        direction = "from" if e.op == "recv" else "to"
        return Stall(key=(g, "p2p", rank, e.index), pg=g, seq=e.p2p_seq, op=e.op,
                     waiting=frozenset({rank}), missing=frozenset({peer}),
                     first_ns=e.time_created_ns, order={rank: e.index}, inferred=True,
                     label=f"{e.op} {direction} rank {peer} on {self.m.label(g)}", p2p=True)

    def _blocked_at(self) -> dict[int, tuple]:
        """Each rank's earliest (in its own call order) stalled call it is waiting in."""
        best: dict[int, tuple[int, tuple]] = {}
        for key, stall in self.all_stalls.items():
            for r in stall.waiting:
                idx = stall.order[r]
                if r not in best or idx < best[r][0]:
                    best[r] = (idx, key)
        return {r: key for r, (_, key) in best.items()}

    def _roots(self, key: tuple) -> tuple[set[int], set[int], list[tuple], set[int]]:
        """(culprits, victims in between, stalls visited, ranks inside a stuck transfer)
        behind stall ``key``."""
        culprits: set[int] = set()
        victims: set[int] = set()
        in_comm: set[int] = set()
        seen_keys: dict[tuple, None] = {}
        path: list[tuple] = []

        def visit(k: tuple) -> None:
            if k in path:  # circular wait: everyone on the cycle is at fault
                for kk in path[path.index(k):]:
                    culprits.update(self.all_stalls[kk].missing)
                return
            if k in seen_keys:
                return
            seen_keys[k] = None
            path.append(k)
            for r in sorted(self.all_stalls[k].missing):
                if r in self.blocked:
                    victims.add(r)
                    visit(self.blocked[r])
                elif r in self.in_comm:
                    in_comm.add(r)
                else:
                    culprits.add(r)
            path.pop()

        visit(key)
        return culprits, victims - culprits, list(seen_keys), in_comm

    # -- reports --------------------------------------------------------------------------------

    def hangs(self) -> list[FaultReport]:
        clusters: dict[frozenset[int], list[Stall]] = defaultdict(list)
        victims_of: dict[frozenset[int], set[int]] = defaultdict(set)
        for stall in sorted(self.stalls.values(), key=_stall_order):
            culprits, victims, visited, in_comm = self._roots(stall.key)
            if not culprits:
                for h in {self.in_comm[r].label: self.in_comm[r] for r in in_comm}.values():
                    self.behind_comm[h.label].append(stall)
                continue
            cluster = clusters[frozenset(culprits)]
            cluster.append(stall)
            cluster.extend(self.inferred[k] for k in visited
                           if k in self.inferred and self.inferred[k] not in cluster)
            victims_of[frozenset(culprits)] |= victims
        reports = [self._hang_report(culprits, stalls, victims_of[culprits])
                   for culprits, stalls in clusters.items()]
        reports.sort(key=lambda r: (r.first_seen_ns, r.pg or "", r.seq or 0))
        return reports

    def _hang_report(self, culprits: frozenset[int], stalls: list[Stall],
                     victims: set[int]) -> FaultReport:
        # Report on the call the culprits themselves never joined (the earliest such one).
        direct = [s for s in stalls if s.missing & culprits and not s.inferred] or stalls
        main = direct[0]
        undumped = self.m.undumped
        suspects = [Suspect(type="rank", id=str(r), rank=r,
                            score=UNDUMPED_CULPRIT_SCORE if r in undumped else CULPRIT_SCORE)
                    for r in sorted(culprits, key=lambda r: (r in undumped, r))]
        suspects += [Suspect(type="rank", id=str(r), rank=r, score=VICTIM_SCORE)
                     for r in sorted(victims)]
        cyclic = bool(culprits & set(self.blocked))
        stuck = {r: self.in_comm[r].label for s in stalls for r in s.missing
                 if r in self.in_comm and r not in self.blocked}
        evidence = {
            "stalled_calls": [
                {"pg": s.pg, "seq": s.seq, "op": s.op, "call": s.describe(),
                 "waiting": sorted(s.waiting), "missing": sorted(s.missing),
                 "inferred": s.inferred, "p2p": s.p2p, "reason": s.reason} for s in stalls],
            "last_call": {str(r): self._last_call(r) for r in sorted(culprits | victims)},
            "blocked_in": {str(r): self._where(self.blocked[r])
                           for r in sorted(victims | culprits) if r in self.blocked},
            "no_dump": sorted(culprits & undumped),
            "circular_wait": cyclic,
            "stuck_in_unfinished_call": stuck,
        }
        return FaultReport(kind="noncomm_hang", suspects=tuple(suspects),
                           first_seen_ns=main.first_ns or 0,
                           summary=self._hang_summary(culprits, main, stalls, cyclic, stuck),
                           pg=main.pg, seq=main.seq, evidence=evidence)

    def _hang_summary(self, culprits: frozenset[int], main: Stall, stalls: list[Stall],
                      cyclic: bool, stuck: dict[int, str]) -> str:
        who = ranks(culprits)
        call = main.describe()
        if cyclic:
            return (f"circular wait: {who} each wait in a call the others never reach "
                    f"(first {call}): the ranks issue collectives in different orders")
        waiters = ranks(main.waiting)
        if main.reason == "never_started":
            parts = [f"{who} entered {call} but {verb(culprits, 'its', 'their')} GPU never "
                     f"started it while {waiters} {verb(main.waiting, 'waits', 'wait')} inside: "
                     f"work queued before it on {verb(culprits, 'that rank', 'those ranks')} "
                     "did not finish"]
        elif main.p2p:
            other = "recv" if main.op == "send" else "send"
            parts = [f"{who} never posted the {other} matching the {main.op} {waiters} "
                     f"{verb(main.waiting, 'waits', 'wait')} in ({call})"]
        else:
            parts = [f"{who} never joined {call}, which {waiters} "
                     f"{verb(main.waiting, 'waits', 'wait')} in"]
        dead = culprits & self.m.undumped
        if dead:
            parts.append(f"{ranks(dead)} left no dump: check whether "
                         f"{verb(dead, 'it', 'they')} died")
        for r, where in sorted(stuck.items()):
            parts.append(f"rank {r} is itself inside {where}, which never completed")
        for s in stalls:
            behind = s.waiting - main.waiting - culprits
            if s is not main and behind:
                parts.append(f"{ranks(behind)} {verb(behind, 'waits', 'wait')} behind "
                             f"in {s.describe()}")
        return "; ".join(parts)

    def _where(self, key: tuple) -> dict:
        s = self.all_stalls[key]
        return {"pg": s.pg, "seq": s.seq}

    def _last_call(self, rank: int) -> str | None:
        d = self.t.dumps.get(rank)
        if d is None or not d.entries:
            return None
        e = d.entries[-1]
        return f"{e.label} ({self.t.p2p_state(e) if e.is_p2p else e.state})"

    def comm_hangs(self) -> list[FaultReport]:
        """The comm hangs, with the stalled calls that wait behind them and nothing else."""
        out = []
        for h in self.comm:
            behind = self.behind_comm.get(h.label, [])
            r = h.report
            if behind:
                waiters = set().union(*(s.waiting for s in behind))
                r = r.with_updates(
                    summary=f"{r.summary}; {ranks(waiters)} "
                            f"{verb(waiters, 'waits', 'wait')} behind it in "
                            + ", ".join(s.describe() for s in behind),
                    evidence={**r.evidence, "behind_it": [
                        {"pg": s.pg, "seq": s.seq, "waiting": sorted(s.waiting),
                         "missing": sorted(s.missing)} for s in behind]})
            out.append(r)
        return out


def _op(by_rank: dict[int, list[FrEntry]]) -> str:
    """The call's operation: a coalesced group is named by its closing entry."""
    ops = Counter(e.op for es in by_rank.values() for e in es if e.closes_group)
    ops = ops or Counter(e.op for es in by_rank.values() for e in es)
    return ops.most_common(1)[0][0] if ops else "call"


def _stall_order(s: Stall) -> tuple:
    return (s.first_ns is None, s.first_ns or 0, s.p2p, str(s.key))
