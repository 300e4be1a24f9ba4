"""Find hangs, mismatched collectives and failed calls in a job's Flight Recorder dumps.

Entries are matched across ranks by (process group name, collective sequence id). Everything is
reasoned from which ranks recorded which calls, because gloo never moves an entry past
``scheduled`` and records no start or completion times:

* **noncomm_hang**: some members entered a call that others never reached. A missing rank that
  is itself stuck in another call waiting for someone else is a victim; the chain is followed
  to the ranks that wait on nobody, and those are the culprits.
* **error** (mismatch): members recorded different calls, or different sizes, at the same
  sequence id. The culprits are the ranks that disagree with the majority, not (as a
  reference-rank comparison would have it) everyone who disagrees with rank 0.
* **comm_hang**: every member entered a call and the backend reports it started but never
  completed (NCCL); gloo cannot tell this apart from success, so it is never reported there.
* **error** (state): entries the backend marked as failed or timed out.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from diagnosis.flight_recorder.dumps import FrEntry, RankDump, load_dumps
from diagnosis.flight_recorder.groups import Membership, infer_membership
from diagnosis.report import FaultReport, Suspect

log = logging.getLogger(__name__)

ERROR_STATES = frozenset({"error", "errored", "failed", "timeout", "timed_out", "timedout",
                          "aborted"})
# Calls whose per-rank sizes legitimately differ: compare only what every member shares.
_ONLY_OP = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "all_gather_v",
                      "reduce_scatter_v", "barrier", "coalesced", "split", "new_window"})
_INPUT_ONLY = frozenset({"gather"})
_OUTPUT_ONLY = frozenset({"scatter"})

CULPRIT_SCORE = 0.9
UNDUMPED_CULPRIT_SCORE = 0.8
VICTIM_SCORE = 0.3
MISMATCH_SCORE = 0.9
TIE_SCORE = 0.5
COMM_HANG_SCORE = 0.5
STATE_ERROR_SCORE = 0.6

Key = tuple[str, int]  # (process group name, collective sequence id)


def analyze_dumps(path: Path, prefix: str | None = None) -> list[FaultReport]:
    """Fault reports for the Flight Recorder dumps in directory ``path`` (one file per rank).

    Raises:
        DiagnosisError: ``path`` holds no dumps, or several sets that ``prefix`` must choose from.
        FormatError: a dump is malformed or truncated (the message names the file and field).
    """
    return analyze(load_dumps(Path(path), prefix))


def analyze(dumps: Sequence[RankDump]) -> list[FaultReport]:
    """Fault reports for already loaded dumps, hangs first, then mismatches, then failures."""
    job = _Job(dumps)
    return [*job.hangs(), *job.mismatches(), *job.comm_hangs(), *job.state_errors()]


@dataclass(frozen=True)
class _Stall:
    """A call some members entered and others never reached."""

    key: Key
    op: str
    waiting: frozenset[int]
    missing: frozenset[int]
    first_ns: int | None
    order: dict[int, int]  # each waiting rank's position of this call in its own buffer
    inferred: bool = False  # members missing from it are guessed: its group is not fully known
    label: str = ""

    def describe(self) -> str:
        return self.label or f"{self.op} #{self.key[1]} on process group {self.key[0]!r}"


class _Job:
    def __init__(self, dumps: Sequence[RankDump]) -> None:
        self.dumps = {d.rank: d for d in dumps}
        self.membership: Membership = infer_membership(dumps)
        self.calls: dict[Key, dict[int, list[FrEntry]]] = defaultdict(lambda: defaultdict(list))
        self.last_seq: dict[tuple[int, str], int] = {}
        self.tracks_state = False
        for d in dumps:
            for e in d.entries:
                self.tracks_state |= e.state in ("started", "completed")
                if e.is_p2p:
                    continue
                self.calls[(e.pg, e.seq)][d.rank].append(e)
                k = (d.rank, e.pg)
                self.last_seq[k] = max(self.last_seq.get(k, e.seq), e.seq)
        self.stalls = self._find_stalls()
        self.inferred = self._infer_hidden_stalls()
        self.all_stalls = {**self.inferred, **self.stalls}

    # -- hangs -------------------------------------------------------------------------------

    def _find_stalls(self) -> dict[Key, _Stall]:
        stalls: dict[Key, _Stall] = {}
        for key, by_rank in self.calls.items():
            pg, seq = key
            waiting = frozenset(r for r, es in by_rank.items()
                                if any(e.state != "completed" for e in es))
            if not waiting:
                continue
            missing = frozenset(r for r in self.membership.of(pg) - by_rank.keys()
                                if self.last_seq.get((r, pg), -1) < seq)
            if missing:
                stalls[key] = _Stall(key=key, op=_op(by_rank), waiting=waiting,
                                     missing=missing, first_ns=_first_ns(by_rank, waiting),
                                     order=_order(by_rank, waiting))
        return stalls

    def _infer_hidden_stalls(self) -> dict[Key, _Stall]:
        """Waits the collectives alone do not show, for ranks that never joined a stall.

        Such a rank may itself be stuck in its last call: a point-to-point receive or send
        (NCCL records those) whose peer never came, or a collective on a group whose other
        members we cannot see (gloo leaves pg_config empty, and a rank that never calls on a
        group leaves no trace of belonging to it). In the second case the ranks missing
        elsewhere that are not known members of that group are its likely absentees.
        """
        absent = set().union(*(s.missing for s in self.stalls.values())) if self.stalls else set()
        known_blocked = {r for s in self.stalls.values() for r in s.waiting}
        out: dict[Key, _Stall] = {}
        for r in sorted(absent - known_blocked):
            d = self.dumps.get(r)
            if d is None or not d.entries:
                continue
            last = max(d.entries, key=lambda e: e.index)
            if last.state == "completed":
                continue
            if last.is_p2p:
                wait = self._p2p_wait(r, last)
                if wait is not None:
                    out[wait.key] = wait
                continue
            key = (last.pg, last.seq)
            if key in self.stalls or self.membership.is_complete(last.pg):
                continue
            candidates = frozenset(absent - self.membership.of(last.pg))
            if not candidates:
                continue
            by_rank = self.calls[key]
            prev = out.get(key)
            out[key] = _Stall(key=key, op=_op(by_rank),
                              waiting=(prev.waiting if prev else frozenset()) | {r},
                              missing=candidates, first_ns=_first_ns(by_rank, [r]),
                              order={**(prev.order if prev else {}), r: last.index},
                              inferred=True)
        return out

    def _p2p_wait(self, rank: int, e: FrEntry) -> _Stall | None:
        """Rank ``rank`` blocked in send/recv ``e``: a wait on its peer."""
        members = sorted(self.membership.of(e.pg))
        local = re.findall(r"\d+", e.peer)
        if not self.membership.is_complete(e.pg) or len(local) != 2:
            return None
        # "send 0->1" and "recv 1<-0" name group-local ranks: the peer is the other one.
        a, b = (int(x) for x in local)
        if max(a, b) >= len(members):
            return None
        ga, gb = members[a], members[b]
        peer = gb if ga == rank else ga if gb == rank else None
        if peer is None or peer == rank:
            return None
        direction = "from" if e.op == "recv" else "to"
        return _Stall(key=(f"{e.pg}/p2p/{rank}", e.p2p_seq), op=e.op, waiting=frozenset({rank}),
                      missing=frozenset({peer}), first_ns=e.time_created_ns,
                      order={rank: e.index}, inferred=True,
                      label=f"{e.op} {direction} rank {peer} on process group {e.pg!r}")

    def _blocked_at(self) -> dict[int, Key]:
        """Each rank's earliest (in its own call order) stalled call it entered."""
        best: dict[int, tuple[int, Key]] = {}
        for key, stall in self.all_stalls.items():
            for r in stall.waiting:
                idx = stall.order[r]
                if r not in best or idx < best[r][0]:
                    best[r] = (idx, key)
        return {r: key for r, (_, key) in best.items()}

    def _roots(self, key: Key, blocked: dict[int, Key]) -> tuple[set[int], set[int], list[Key]]:
        """(culprits, victims in between, stalls visited) behind stall ``key``."""
        culprits: set[int] = set()
        victims: set[int] = set()
        seen_keys: dict[Key, None] = {}
        path: list[Key] = []

        def visit(k: Key) -> None:
            if k in path:  # circular wait: everyone on the cycle is at fault
                for kk in path[path.index(k):]:
                    culprits.update(self.all_stalls[kk].missing)
                return
            if k in seen_keys:
                return
            seen_keys[k] = None
            path.append(k)
            for r in sorted(self.all_stalls[k].missing):
                if r in blocked:
                    victims.add(r)
                    visit(blocked[r])
                else:
                    culprits.add(r)
            path.pop()

        visit(key)
        return culprits, victims - culprits, list(seen_keys)

    def hangs(self) -> list[FaultReport]:
        if not self.stalls:
            return []
        blocked = self._blocked_at()
        clusters: dict[frozenset[int], list[_Stall]] = defaultdict(list)
        victims_of: dict[frozenset[int], set[int]] = defaultdict(set)
        for stall in sorted(self.stalls.values(), key=_stall_order):
            culprits, victims, visited = self._roots(stall.key, blocked)
            cluster = clusters[frozenset(culprits)]
            cluster.append(stall)
            cluster.extend(self.inferred[k] for k in visited
                           if k in self.inferred and self.inferred[k] not in cluster)
            victims_of[frozenset(culprits)] |= victims
        reports = []
        for culprits, stalls in clusters.items():
            reports.append(self._hang_report(culprits, stalls, victims_of[culprits], blocked))
        reports.sort(key=lambda r: (r.first_seen_ns, r.pg or "", r.seq or 0))
        return reports

    def _hang_report(self, culprits: frozenset[int], stalls: list[_Stall],
                     victims: set[int], blocked: dict[int, Key]) -> FaultReport:
        # Report on the call the culprits themselves never joined (the earliest such one).
        direct = [s for s in stalls if s.missing & culprits and not s.inferred] or stalls
        main = direct[0]
        undumped = self.membership.undumped
        suspects = [Suspect(type="rank", id=str(r), rank=r,
                            score=UNDUMPED_CULPRIT_SCORE if r in undumped else CULPRIT_SCORE)
                    for r in sorted(culprits, key=lambda r: (r in undumped, r))]
        suspects += [Suspect(type="rank", id=str(r), rank=r, score=VICTIM_SCORE)
                     for r in sorted(victims)]
        cyclic = bool(culprits & set(blocked))
        summary = self._hang_summary(culprits, main, stalls, cyclic)
        evidence = {
            "stalled_calls": [
                {"pg": s.key[0], "seq": s.key[1], "op": s.op, "call": s.describe(),
                 "waiting": sorted(s.waiting), "missing": sorted(s.missing),
                 "inferred": s.inferred} for s in stalls],
            "last_call": {str(r): self._last_call(r) for r in sorted(culprits | victims)},
            "blocked_in": {str(r): {"pg": blocked[r][0], "seq": blocked[r][1]}
                           for r in sorted(victims | culprits) if r in blocked},
            "no_dump": sorted(culprits & undumped),
            "circular_wait": cyclic,
        }
        return FaultReport(kind="noncomm_hang", suspects=tuple(suspects),
                           first_seen_ns=main.first_ns or 0, summary=summary, pg=main.key[0],
                           seq=main.key[1], evidence=evidence)

    def _hang_summary(self, culprits: frozenset[int], main: _Stall, stalls: list[_Stall],
                      cyclic: bool) -> str:
        who = _ranks(culprits)
        call = main.describe()
        if cyclic:
            return (f"circular wait: {who} each wait in a call the others never reach "
                    f"(first {call}): the ranks issue collectives in different orders")
        parts = [f"{who} never joined {call}, which {_ranks(main.waiting)} "
                 f"{_verb(main.waiting, 'waits', 'wait')} in"]
        dead = culprits & self.membership.undumped
        if dead:
            parts.append(f"{_ranks(dead)} left no dump: check whether "
                         f"{_verb(dead, 'it', 'they')} died")
        for s in stalls:
            behind = s.waiting - main.waiting - culprits
            if s is not main and behind:
                parts.append(f"{_ranks(behind)} {_verb(behind, 'waits', 'wait')} behind "
                             f"in {s.describe()}")
        return "; ".join(parts)

    def _last_call(self, rank: int) -> str | None:
        d = self.dumps.get(rank)
        if d is None or not d.entries:
            return None
        e = max(d.entries, key=lambda e: e.index)
        return e.label

    # -- mismatches --------------------------------------------------------------------------

    def mismatches(self) -> list[FaultReport]:
        first: dict[str, tuple[int, dict[int, tuple]]] = {}
        later: Counter[str] = Counter()
        for (pg, seq), by_rank in self.calls.items():
            if len(by_rank) < 2:
                continue
            sigs = {r: tuple(_signature(e) for e in sorted(es, key=lambda e: e.index))
                    for r, es in by_rank.items()}
            if len(set(sigs.values())) < 2:
                continue
            if pg not in first or seq < first[pg][0]:
                if pg in first:
                    later[pg] += 1
                first[pg] = (seq, sigs)
            else:
                later[pg] += 1
        reports = [self._mismatch_report(pg, seq, sigs, later[pg])
                   for pg, (seq, sigs) in sorted(first.items())]
        reports.sort(key=lambda r: (r.first_seen_ns, r.pg or ""))
        return reports

    def _mismatch_report(self, pg: str, seq: int, sigs: dict[int, tuple],
                         later: int) -> FaultReport:
        counts = Counter(sigs.values())
        ranked = counts.most_common()
        tie = len(ranked) > 1 and ranked[0][1] == ranked[1][1]
        majority = ranked[0][0]
        odd = sorted(r for r, s in sigs.items() if s != majority)
        calls = self.calls[(pg, seq)]
        if tie:
            suspects = [Suspect(type="rank", id=str(r), rank=r, score=TIE_SCORE)
                        for r in sorted(sigs)]
            summary = (f"ranks disagree at call #{seq} on process group {pg!r} with no majority: "
                       + "; ".join(f"{_ranks(rs)} called {_describe(sig)}"
                                   for sig, rs in _by_signature(sigs)))
        else:
            suspects = [Suspect(type="rank", id=str(r), rank=r, score=MISMATCH_SCORE)
                        for r in odd]
            summary = (f"{_ranks(odd)} called "
                       + " / ".join(_describe(sigs[r]) for r in _unique(odd, sigs))
                       + f" where {_ranks(r for r, s in sigs.items() if s == majority)} called "
                       + f"{_describe(majority)} (call #{seq} on process group {pg!r})")
        evidence = {
            "calls": {_describe(sig): rs for sig, rs in _by_signature(sigs)},
            "majority": None if tie else _describe(majority),
            "later_mismatched_calls": later,
        }
        return FaultReport(kind="error", suspects=tuple(suspects),
                           first_seen_ns=_first_ns(calls, calls.keys()) or 0, summary=summary,
                           pg=pg, seq=seq, evidence=evidence)

    # -- comm hangs and failed calls ------------------------------------------------------------

    def comm_hangs(self) -> list[FaultReport]:
        if not self.tracks_state:
            return []  # gloo: "scheduled" forever, so a finished call looks like a stuck one
        earliest: dict[str, Key] = {}
        for key, by_rank in self.calls.items():
            pg, seq = key
            members = self.membership.of(pg)
            if key in self.stalls or not members or set(by_rank) != members:
                continue
            if not any(e.state == "started" for es in by_rank.values() for e in es):
                continue
            if pg not in earliest or seq < earliest[pg][1]:
                earliest[pg] = key
        reports = []
        for pg, key in sorted(earliest.items()):
            by_rank = self.calls[key]
            stuck = sorted(r for r, es in by_rank.items()
                           if any(e.state == "started" for e in es))
            reports.append(FaultReport(
                kind="comm_hang",
                suspects=tuple(Suspect(type="rank", id=str(r), rank=r, score=COMM_HANG_SCORE)
                               for r in stuck),
                first_seen_ns=_first_ns(by_rank, by_rank.keys()) or 0,
                summary=(f"all {len(by_rank)} ranks entered {_op(by_rank)} #{key[1]} on process "
                         f"group {pg!r} but it never completed on {_ranks(stuck)}: "
                         "the transfer itself is stuck"),
                pg=pg, seq=key[1], evidence={"started": stuck}))
        return reports

    def state_errors(self) -> list[FaultReport]:
        failed: dict[Key, dict[int, str]] = defaultdict(dict)
        for d in self.dumps.values():
            for e in d.entries:
                if e.state.lower() in ERROR_STATES:
                    failed[(e.pg, e.seq)][d.rank] = e.state
        reports = []
        for (pg, seq), ranks in sorted(failed.items()):
            by_rank = self.calls.get((pg, seq), {})
            op = _op(by_rank) if by_rank else "call"
            reports.append(FaultReport(
                kind="error",
                suspects=tuple(Suspect(type="rank", id=str(r), rank=r, score=STATE_ERROR_SCORE)
                               for r in sorted(ranks)),
                first_seen_ns=_first_ns(by_rank, ranks.keys()) or 0,
                summary=(f"{op} #{seq} on process group {pg!r} failed on {_ranks(ranks)} "
                         f"(state {', '.join(sorted(set(ranks.values())))})"),
                pg=pg, seq=seq, evidence={"states": {str(r): s for r, s in ranks.items()}}))
        return reports


def _signature(e: FrEntry) -> tuple:
    if e.op in _ONLY_OP:
        return (e.op,)
    if e.op in _INPUT_ONLY:
        return (e.op, e.input_sizes, e.input_dtypes)
    if e.op in _OUTPUT_ONLY:
        return (e.op, e.output_sizes, e.output_dtypes)
    return (e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes)


def _describe(sig: tuple) -> str:
    """``all_reduce[16] Float``, ``all_gather[16->3x16] Float``: what a rank called."""
    parts = []
    for s in sig:
        if len(s) == 1:
            parts.append(s[0])
            continue
        if len(s) == 3:
            shape, dtypes = _shapes(s[1]), s[2]
        else:
            shape = _shapes(s[1]) if s[1] == s[2] else f"{_shapes(s[1])}->{_shapes(s[2])}"
            dtypes = (*s[3], *s[4])
        dt = "/".join(sorted(set(dtypes)))
        parts.append(f"{s[0]}[{shape}]" + (f" {dt}" if dt else ""))
    return " + ".join(parts) or "nothing"


def _shapes(sizes: tuple) -> str:
    return ",".join("x".join(str(n) for n in t) if isinstance(t, tuple) else str(t)
                    for t in sizes)


def _by_signature(sigs: dict[int, tuple]) -> list[tuple[tuple, list[int]]]:
    groups: dict[tuple, list[int]] = defaultdict(list)
    for r, s in sorted(sigs.items()):
        groups[s].append(r)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))


def _unique(ranks: list[int], sigs: dict[int, tuple]) -> list[int]:
    seen: set[tuple] = set()
    out = []
    for r in ranks:
        if sigs[r] not in seen:
            seen.add(sigs[r])
            out.append(r)
    return out


def _op(by_rank: dict[int, list[FrEntry]]) -> str:
    ops = Counter(e.op for es in by_rank.values() for e in es)
    return ops.most_common(1)[0][0] if ops else "call"


def _first_ns(by_rank: dict[int, list[FrEntry]], ranks: Iterable[int]) -> int | None:
    times = [e.time_created_ns for r in ranks for e in by_rank.get(r, ())
             if e.time_created_ns is not None]
    return min(times) if times else None


def _order(by_rank: dict[int, list[FrEntry]], ranks: Iterable[int]) -> dict[int, int]:
    return {r: min(e.index for e in by_rank[r]) for r in ranks}


def _stall_order(s: _Stall) -> tuple:
    return (s.first_ns is None, s.first_ns or 0, s.key)


def _verb(ranks: Iterable[int], one: str, many: str) -> str:
    return one if len(set(ranks)) == 1 else many


def _ranks(ranks: Iterable[int]) -> str:
    rs = sorted(set(ranks))
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)
