"""Every rank's entries arranged by call: (group, collective sequence id) -> rank -> entries.

Also what the analysis must know about each rank's buffer: which calls it could still show
(a ring buffer keeps only the newest entries), and the state of each call it recorded:

* A coalesced group is one call: its members share one collective_seq_id and are recorded
  without events (they stay ``scheduled`` forever); the entry closing the group carries the
  group's state. The same holds for a batch of sends and receives and its p2p_seq_id.
* A group "tracks state" when its backend moves entries past ``scheduled`` (NCCL and its kin);
  gloo never does, so there every recorded call looks unfinished.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from diagnosis.flight_recorder.groups import Membership, infer_membership
from diagnosis.flight_recorder.parse import STATES_IN_ORDER, FrEntry, RankDump

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (group key, collective sequence id)

# Backends that mark entries started/completed (the accelerator libraries torch's analyzer
# knows, all built on device events). gloo never does; an unknown backend is trusted to track
# state only once one of its entries shows it.
_STATEFUL_BACKENDS = frozenset({"nccl", "ncclx", "rccl", "rcclx", "xccl", "hccl", "mccl"})


@dataclass(frozen=True)
class Stall:
    """A call some members are inside while others never reached it (or never started it)."""

    key: tuple  # unique: (group, seq) for collectives, (group, src, dst, index) for p2p
    pg: str
    seq: int | None
    op: str
    waiting: frozenset[int]
    missing: frozenset[int]
    first_ns: int | None
    order: dict[int, int]  # each waiting rank's record_id of this call
    inferred: bool = False  # members missing from it are guessed: its group is not fully known
    label: str = ""
    reason: str = "never_joined"  # "never_started": entered, but its GPU stream never began it
    p2p: bool = False

    def describe(self) -> str:
        return self.label or f"{self.op} #{self.seq} on process group {self.pg!r}"


class CallTable:
    def __init__(self, dumps: Sequence[RankDump]) -> None:
        self.dumps = {d.rank: d for d in dumps}
        self.membership: Membership = infer_membership(dumps)
        self.calls: dict[Key, dict[int, list[FrEntry]]] = defaultdict(lambda: defaultdict(list))
        self.p2p_ops: dict[tuple[str, int], list[FrEntry]] = defaultdict(list)
        self.batch_end: dict[tuple[str, int, int], FrEntry] = {}  # (group, rank, p2p_seq)
        self.last_seq: dict[tuple[int, str], int] = {}
        self.last_key: dict[int, Key] = {}  # each rank's newest collective, if its newest call
        self.backends: dict[str, set[str]] = defaultdict(set)
        self.progressed: set[str] = set()  # groups with an entry past "scheduled"
        # Ranks whose entries say when their GPU began a call: timing was on (an entry is
        # "started", or a duration was measured). On the others "scheduled" means nothing more
        # than "not completed".
        self.reports_starts: set[int] = set()
        for d in dumps:
            for e in d.entries:
                g = self.group(e)
                self.backends[g].add(e.backend)
                if e.state in ("started", "completed"):
                    self.progressed.add(g)
                if e.state == "started" or e.duration_ms is not None:
                    self.reports_starts.add(d.rank)
                if e.is_p2p:
                    if e.op in ("send", "recv"):
                        self.p2p_ops[(g, d.rank)].append(e)
                    elif e.closes_group:
                        self.batch_end[(g, d.rank, e.p2p_seq)] = e
                    continue
                self.calls[(g, e.seq)][d.rank].append(e)
                k = (d.rank, g)
                self.last_seq[k] = max(self.last_seq.get(k, e.seq), e.seq)
            if d.entries and not d.entries[-1].is_p2p:
                self.last_key[d.rank] = (self.group(d.entries[-1]), d.entries[-1].seq)
            if not d.whole_history:
                log.debug("%s: the buffer starts at record %d (it wrapped, or holds active "
                          "calls only): calls before it are not known", d.source,
                          d.entries[0].index)

    def group(self, e: FrEntry) -> str:
        return self.membership.key(e.rank, e.pg)

    def tracks_state(self, pg: str) -> bool:
        """Whether "not completed" means what it says on this group."""
        return pg in self.progressed or bool(self.backends.get(pg, set()) & _STATEFUL_BACKENDS)

    def never_started(self, rank: int, state: str) -> bool:
        """Whether a call in ``state`` was enqueued but its GPU stream never began it."""
        return state == "scheduled" and rank in self.reports_starts

    def state(self, rank: int, key: Key) -> str:
        """A rank's state of a call: its closing entry's if coalesced, else its least advanced."""
        return call_state(self.calls[key].get(rank, ()))

    def p2p_state(self, e: FrEntry) -> str:
        end = self.batch_end.get((self.group(e), e.rank, e.p2p_seq))
        return end.state if end is not None and end.index > e.index else e.state

    def absent(self, rank: int, key: Key, waiting: Iterable[int], when_ns: int | None) -> bool:
        """Whether ``rank`` (not among those that recorded ``key``) never reached it.

        A rank that recorded a later call on the group is past it; one whose newest call on the
        group is older never reached it. A rank whose buffer holds nothing on the group never
        called on it, unless the buffer wrapped after the call was made: then it cannot tell.
        A rank without a dump cannot tell either; on a group without states only the waiting
        ranks' newest calls are blamed on it (they are what they are stuck in; the calls before
        them finished, or the ranks would not have gone on).
        """
        pg, seq = key
        d = self.dumps.get(rank)
        if d is None:
            if self.tracks_state(pg):
                return True
            return any(self.last_key.get(w) == key for w in waiting)
        last = self.last_seq.get((rank, pg))
        if last is not None:
            return last < seq
        if d.whole_history:
            return True
        oldest = d.oldest_ns
        return when_ns is not None and oldest is not None and when_ns >= oldest

    def first_ns(self, key: Key, ranks: Iterable[int]) -> int | None:
        return first_ns(self.calls.get(key, {}), ranks)


def call_state(entries: Sequence[FrEntry]) -> str:
    ends = [e for e in entries if e.closes_group]
    if ends:
        return max(ends, key=lambda e: e.index).state
    states = [e.state for e in entries]
    known = [s for s in states if s in STATES_IN_ORDER]
    if len(known) < len(states):
        return next(s for s in states if s not in STATES_IN_ORDER)
    return min(known, key=STATES_IN_ORDER.index) if known else "scheduled"


def first_ns(by_rank: dict[int, list[FrEntry]], ranks: Iterable[int]) -> int | None:
    times = [e.time_created_ns for r in ranks for e in by_rank.get(r, ())
             if e.time_created_ns is not None]
    return min(times) if times else None


def order(by_rank: dict[int, list[FrEntry]], ranks: Iterable[int]) -> dict[int, int]:
    return {r: min(e.index for e in by_rank[r]) for r in ranks}
