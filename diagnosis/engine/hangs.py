"""Hangs and errors: calls that some members entered and that do not finish.

* A rank whose open row is for a call every other member got out of, and which is absent from a
  later collective the others completed (impossible without it), left that call: its last rows
  were lost (a frozen collector keeps them). It waits nowhere, so it can be a culprit.
* Someone never arrived (``noncomm_hang``): the culprits are the absent members that are not
  themselves waiting in another call; an absent member that waits elsewhere is a victim, and the
  chain is followed by excluding every waiting rank. When every absent member waits elsewhere
  (what a frozen rank whose telemetry froze too looks like: its peers' calls and its own open
  ones wait on each other), the chain's rank heard from least recently stopped first.
* Everyone entered and some members got out while the rest wait: a member stopped inside the
  call, not the transfer (which would hold everyone); resolved the same way.
* Everyone arrived and nothing finishes (``comm_hang``): the transfer is at fault; localized by
  the connections that stopped moving (or, without connection records, by the communicator's
  structure against the communicators that still progress).
* A member failed (``error``): no bound needed to see it; the culprit is whoever never came
  (it died) or else the earliest member that failed. The report waits a grace period in case the
  job is being torn down (see ``teardown``); rows that arrive meanwhile (a member only late to
  report its failure) correct the culprits. A rank whose latest call failed is a victim of that
  error: it is no culprit of a hang, nor of a failed call it never entered.
* A call its members left only by failing, after waiting past its hang bound (a collective
  timeout such as NCCL's watchdog), was a hang: the absent members' ``noncomm_hang`` (a
  ``comm_hang`` if every member was inside), not an error nor a teardown.
A wait is a hang once it exceeds the communicator's learnt bound (see ``timing``); a call of an
operation the communicator never completed before waits at least the cold bound (its normal
wait is unknown: the barrier after a checkpoint one rank writes alone). Hang reports are held
while the whole job looks stopped at once (``stalled_at_once`` and ``teardown``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from diagnosis.engine.arena import Arena

_BIG = np.iinfo(np.int64).max


@dataclass
class Stuck:
    slot: int
    group: int
    seq: int
    op: int
    # first and last entry; a member queued behind its own earlier calls (a GPU's stream)
    # counts as entered when those ended
    first: int
    last: int
    bound: int
    ranks: np.ndarray     # members
    enter: np.ndarray
    end: np.ndarray
    status: np.ndarray

    @property
    def absent(self) -> np.ndarray:
        return self.ranks[self.enter < 0]

    @property
    def waiting(self) -> np.ndarray:
        return self.ranks[(self.enter >= 0) & (self.end < 0)]

    @property
    def failed(self) -> np.ndarray:
        return self.ranks[self.status > 0]


@dataclass
class HangScan:
    """What is open right now: calls past their bound, failed calls, and who waits where."""

    now: int
    stuck: list[Stuck] = field(default_factory=list)       # past bound, no failure
    failed: list[Stuck] = field(default_factory=list)      # any member failed
    waiting: set[int] = field(default_factory=set)          # ranks waiting in an open call
    moved_on: set[int] = field(default_factory=set)         # left their open call, then stopped


def awaited(arena: Arena) -> set[int]:
    """Ranks absent from an open call that other members wait in: what a frozen rank looks like
    before its peers' wait has lasted long enough to be a hang."""
    slots = arena.open_slots()
    if len(slots) == 0:
        return set()
    idx, n = arena.slot_cells(slots)
    enter, end = arena.c_enter[idx], arena.c_end[idx]
    starts = np.cumsum(n) - n
    waited = np.add.reduceat(((enter >= 0) & (end < 0)).astype(np.int64), starts) > 0
    absent = (enter < 0) & (end < 0) & np.repeat(waited, n)
    return set(arena.c_rank[idx][absent].tolist())


def scan_open(arena: Arena, bounds_of: Callable[[np.ndarray], np.ndarray], now: int,
              symmetric: np.ndarray | None = None,
              tails_of: Callable[[np.ndarray], np.ndarray] | None = None,
              novel_of: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
              cold_ns: int = 0, coarse_lag: int = 0,
              last_end: np.ndarray | None = None) -> HangScan:
    """Every open instance, vectorized; only the few past their bound become Python objects.
    ``symmetric`` (by op id, see ``moved_on``): tell the ranks that moved on from their open
    rows, which then wait nowhere. ``tails_of``: the bound of a call every member entered,
    counted from its last entry (else ``bounds_of`` from the first entry applies to all).
    ``novel_of(groups, ops)``: calls of an operation their communicator never completed
    before; their bound is at least ``cold_ns``. ``coarse_lag``: how far the progress records
    lag the op rows; an instance known from them alone has waited only as long as they tell,
    so its times are moved on by the lag. ``last_end`` (by rank): when each rank last
    completed a call; a rank waits in an open call only from then on (a GPU rank's CPU enqueues
    calls far ahead of its stream, each then queued behind the one before)."""
    out = HangScan(now)
    slots = arena.open_slots()
    if len(slots) == 0:
        return out
    if symmetric is not None:
        out.moved_on = moved_on(arena, symmetric, slots)
    idx, n = arena.slot_cells(slots)
    starts = np.cumsum(n) - n
    enter, end, status = arena.c_enter[idx], arena.c_end[idx], arena.c_status[idx]
    if coarse_lag > 0:
        lag = np.where(np.repeat(arena.s_coarse[slots], n), coarse_lag, 0)
        enter = np.where(enter >= 0, enter + lag, enter)
        end = np.where(end >= 0, end + lag, end)
    ranks = arena.c_rank[idx]
    waiting_cell = (enter >= 0) & (end < 0)
    since = enter      # when each member began to wait
    if last_end is not None and len(last_end):
        known = waiting_cell & (ranks < len(last_end))
        since = enter.copy()
        since[known] = np.maximum(enter[known], last_end[ranks[known]])
    out.waiting = set(np.unique(ranks[waiting_cell]).tolist())
    first = np.minimum.reduceat(np.where(since >= 0, since, _BIG), starts)
    bad = np.add.reduceat((status > 0).astype(np.int64), starts) > 0
    g = slots // arena.W
    bound = bounds_of(g)
    floor = np.zeros(len(g), dtype=np.int64)
    if novel_of is not None:
        floor = np.where(novel_of(g, arena.s_op[slots]), np.int64(cold_ns), floor)
    bound = np.maximum(bound, floor)
    past = (now - first) > bound
    if tails_of is not None:
        last = np.maximum.reduceat(since, starts)
        all_in = np.minimum.reduceat(enter, starts) >= 0
        tail = np.maximum(tails_of(g), floor)
        past |= all_in & ((now - last) > tail)
        bound = np.where(all_in, np.minimum(bound, tail), bound)
    for i in np.flatnonzero(past | bad).tolist():
        sl = slice(starts[i], starts[i] + n[i])
        e = enter[sl]
        st = Stuck(int(slots[i]), int(g[i]), int(arena.s_seq[slots[i]]), int(arena.s_op[slots[i]]),
                   int(first[i]), int(since[sl].max()), int(bound[i]), ranks[sl].copy(),
                   e.copy(), end[sl].copy(), status[sl].copy())
        (out.failed if bad[i] else out.stuck).append(st)
    if out.moved_on:
        out.waiting -= out.moved_on
        # a call whose only waiters moved on is over
        out.stuck = [st for st in out.stuck if len(st.absent)
                     or not set(st.waiting.tolist()) <= out.moved_on]
    return out


def error_culprits(inst: Stuck) -> tuple[list[int], str]:
    """Who caused a failed call: members that never came, else the earliest to fail."""
    absent = inst.absent.tolist()
    if absent:
        return absent, "never entered it"
    fail = inst.status > 0
    errors = fail & (inst.status == 2)
    pick = errors if errors.any() else fail
    order = np.argsort(np.where(pick, np.where(inst.end >= 0, inst.end, _BIG), _BIG),
                       kind="stable")
    culprits = [int(inst.ranks[i]) for i in order if pick[i]]
    first_end = inst.end[order[0]]
    same = [int(inst.ranks[i]) for i in order if pick[i] and inst.end[i] == first_end]
    return (same or culprits[:1]), ("failed first" if errors.any() else "timed out")



def chain(arena: Arena, start: list[int]) -> set[int]:
    """Every rank reached from ``start`` by following who waits for whom: a rank waiting in an
    open call waits for the members that never entered it."""
    slots = arena.open_slots()
    seen = set(start)
    if len(slots) == 0:
        return seen
    idx, n = arena.slot_cells(slots)
    starts = np.cumsum(n) - n
    cell_slot = np.repeat(np.arange(len(slots)), n)
    enter, end, ranks = arena.c_enter[idx], arena.c_end[idx], arena.c_rank[idx]
    waiting = (enter >= 0) & (end < 0)
    todo = list(start)
    while todo:
        r = todo.pop()
        for i in np.unique(cell_slot[waiting & (ranks == r)]).tolist():
            sl = slice(starts[i], starts[i] + n[i])
            for q in ranks[sl][enter[sl] < 0].tolist():
                if q not in seen:
                    seen.add(q)
                    todo.append(q)
    return seen


# Collectives no member can complete before every member has taken part (unlike broadcast,
# scatter or reduce, where a member can be done before another even comes).
SYMMETRIC_OPS = frozenset({
    "all_reduce", "allreduce", "all_gather", "allgather", "all_gather_into_tensor",
    "_allgather_base", "allgather_coalesced", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "all_to_all", "alltoall", "all_to_all_single", "alltoall_base",
    "barrier"})


def op_key(name: str) -> str:
    """An operation name as the op sets here spell it, whatever the recorder: ``AllReduce``,
    ``nccl:all_reduce`` and ``all_reduce`` are one operation (lower case, no backend prefix,
    no underscores; the sets hold both spellings)."""
    return name.rsplit(":", 1)[-1].strip().lower().replace("_", "")


_SYMMETRIC_KEYS = frozenset(op_key(o) for o in SYMMETRIC_OPS)


def is_symmetric(name: str) -> bool:
    return op_key(name) in _SYMMETRIC_KEYS


def moved_on(arena: Arena, symmetric: np.ndarray, slots: np.ndarray | None = None) -> set[int]:
    """Ranks that left a call they still seem to be in, and then stopped.

    A rank whose row for a call is open while every other member of the call got out, and that
    is absent from a later collective the other members all completed (which none of them can
    do without it: ``symmetric`` marks such ops by op id), took part in that collective: its rows
    since the open one were lost (a frozen rank's collector keeps its last rows). It waits in
    neither call: it stopped after them. ``slots``: ``arena.open_slots()``, when already
    read."""
    slots = arena.open_slots() if slots is None else slots
    if len(slots) == 0:
        return set()
    idx, n = arena.slot_cells(slots)
    starts = np.cumsum(n) - n
    enter, end, status, ranks = arena.c_enter[idx], arena.c_end[idx], arena.c_status[idx], \
        arena.c_rank[idx]
    waiting = (enter >= 0) & (end < 0)
    absent = enter < 0
    n_wait = np.add.reduceat(waiting.astype(np.int64), starts)
    n_abs = np.add.reduceat(absent.astype(np.int64), starts)
    n_out = np.add.reduceat((end >= 0).astype(np.int64), starts)
    n_bad = np.add.reduceat((status > 0).astype(np.int64), starts)
    g = slots // arena.W
    ops = arena.s_op[slots]
    known = (ops >= 0) & (ops < len(symmetric))
    sym = np.zeros(len(slots), dtype=bool)
    sym[known] = symmetric[ops[known]]
    left_in = np.flatnonzero((n_abs == 0) & (n_wait > 0) & (n_out > 0))
    done_without = np.flatnonzero((n_wait == 0) & (n_abs > 0) & (n_out > 0) & (n_bad == 0)
                                  & ~arena.p2p[g] & sym)
    if len(left_in) == 0 or len(done_without) == 0:
        return set()
    entered: dict[int, int] = {}     # rank -> its entry into a call it seems to be in
    for i in left_in.tolist():
        sl = slice(starts[i], starts[i] + n[i])
        for r, e in zip(ranks[sl][waiting[sl]].tolist(), enter[sl][waiting[sl]].tolist(),
                        strict=True):
            entered[r] = min(entered.get(r, _BIG), e)
    out: set[int] = set()
    for i in done_without.tolist():
        sl = slice(starts[i], starts[i] + n[i])
        done = int(end[sl].max())
        out.update(r for r in ranks[sl][absent[sl]].tolist()
                   if r in entered and done > entered[r])
    return out


def stalled_at_once(arena: Arena, last_heard: int) -> bool:
    """Whether the calls every member entered and none left (the ends of the wait chains) all
    had their last member come so shortly before the job's last sign of life (``last_heard``)
    that they would not normally have finished yet: the job stopped, nothing says they are
    stuck. False without such a call (every chain ends in a rank that never came)."""
    slots = arena.open_slots()
    if len(slots) == 0:
        return False
    idx, n = arena.slot_cells(slots)
    starts = np.cumsum(n) - n
    enter, end = arena.c_enter[idx], arena.c_end[idx]
    n_abs = np.add.reduceat((enter < 0).astype(np.int64), starts)
    n_out = np.add.reduceat((end >= 0).astype(np.int64), starts)
    last = np.maximum.reduceat(enter, starts)
    sinks = np.flatnonzero((n_abs == 0) & (n_out == 0))
    if len(sinks) == 0:
        return False
    for i in sinks.tolist():
        tail = typical_tail(arena, int(slots[i] // arena.W))
        if tail < 0 or last_heard - int(last[i]) > tail:
            return False
    return True


def typical_tail(arena: Arena, g: int) -> int:
    """The median time communicator ``g``'s recent calls took to finish after their last member
    came (-1 without a finished call)."""
    n = int(arena.n[g])
    slots = g * arena.W + np.arange(arena.W)
    done = slots[arena.s_closed[slots]]
    if len(done) == 0 or n == 0:
        return -1
    idx, _ = arena.slot_cells(done)
    enter = arena.c_enter[idx].reshape(len(done), n)
    end = arena.c_end[idx].reshape(len(done), n)
    return int(np.median(end.max(axis=1) - enter.max(axis=1)))
