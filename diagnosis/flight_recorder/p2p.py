"""Match sends with receives, per process group and directed pair of ranks.

``p2p_seq_id`` does not pair them: it counts every send and receive of one rank on the group,
whatever the peer (a pipeline stage that receives from one neighbour and sends to the other
counts both), so a send and its receive carry different numbers on their two ranks. What
pairs them is order: NCCL delivers the k-th send from a to b into the k-th receive b posts
from a. The two lists are read from the sender's and the receiver's buffers:

* States tracked (NCCL): the unfinished operations of a pair are the tail of each list, and
  the first unfinished send meets the first unfinished receive. An unfinished send with no
  unfinished receive is data the receiver never asked for; a receive with no send, data the
  sender never sent. Both unfinished: both ranks are in the transfer, and it is stuck.
  (Matching tails works when the buffers wrapped, and with dumps of active entries only.)
* No states (a backend that never reports completion): both buffers must hold the ranks'
  whole history, and then the k-th send meets the k-th receive.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from diagnosis.flight_recorder.calls import CallTable, Stall
from diagnosis.flight_recorder.groups import peer_ranks
from diagnosis.flight_recorder.parse import FrEntry

log = logging.getLogger(__name__)

Channel = tuple[str, int, int]  # (group key, src global rank, dst global rank)


@dataclass(frozen=True)
class PendingPair:
    """A send and its receive, both posted and neither finished."""

    pg: str
    send: FrEntry
    recv: FrEntry
    send_state: str
    recv_state: str

    @property
    def ranks(self) -> tuple[int, int]:
        return self.send.rank, self.recv.rank


@dataclass(frozen=True)
class SizeMismatch:
    pg: str
    send: FrEntry
    recv: FrEntry


@dataclass
class P2pFindings:
    stalls: list[Stall]
    pending: list[PendingPair]
    mismatches: list[SizeMismatch]
    # (rank, record_id) of sends/recvs that could not be matched: buffers that wrapped on a
    # backend without states. Only for these may a rank's wait on its peer be guessed.
    unmatched: set[tuple[int, int]] = field(default_factory=set)


def match_p2p(table: CallTable) -> P2pFindings:
    sends, recvs = _channels(table)
    out = P2pFindings([], [], [])
    for ch in sorted(set(sends) | set(recvs)):
        s, r = sends.get(ch, []), recvs.get(ch, [])
        if table.tracks_state(ch[0]):
            _by_tail(table, ch, s, r, out)
        else:
            _by_order(table, ch, s, r, out)
    return out


def _channels(table: CallTable) -> tuple[dict[Channel, list[FrEntry]],
                                         dict[Channel, list[FrEntry]]]:
    sends: dict[Channel, list[FrEntry]] = defaultdict(list)
    recvs: dict[Channel, list[FrEntry]] = defaultdict(list)
    m = table.membership
    for (g, rank), ops in table.p2p_ops.items():
        for e in ops:
            pair = peer_ranks(e.peer)
            if pair is None:
                log.debug("rank %d: %s names no peer; not matched", rank, e.label)
                continue
            src, dst = (m.global_rank(g, x) for x in pair)
            own = src if e.op == "send" else dst
            if own is not None and own != rank:
                log.debug("rank %d: %s names another rank as itself; not matched", rank, e.label)
                continue
            if e.op == "send" and dst is not None:
                sends[(g, rank, dst)].append(e)
            elif e.op == "recv" and src is not None:
                recvs[(g, src, rank)].append(e)
            else:
                log.debug("rank %d: the peer of %s is not known (group %r's members are not); "
                          "not matched", rank, e.label, g)
    return sends, recvs


def _by_tail(table: CallTable, ch: Channel, sends: list[FrEntry], recvs: list[FrEntry],
             out: P2pFindings) -> None:
    ps = [e for e in sends if table.p2p_state(e) != "completed"]
    pr = [e for e in recvs if table.p2p_state(e) != "completed"]
    g, src, dst = ch
    where = table.membership.label(g)
    if ps and pr:
        send, recv = ps[0], pr[0]
        if _sizes(send) != _sizes(recv):
            out.mismatches.append(SizeMismatch(g, send, recv))
        late = [e for e in (send, recv) if table.never_started(e.rank, table.p2p_state(e))]
        if len(late) == 1:
            waiter = recv if late[0] is send else send
            out.stalls.append(_stall(where, ch, waiter, waiting=waiter.rank,
                                     missing=late[0].rank, reason="never_started",
                                     named_by=late[0]))
        else:  # both inside (or both not begun: comm.py decides whether that is stuck)
            out.pending.append(PendingPair(g, send, recv, table.p2p_state(send),
                                           table.p2p_state(recv)))
        return
    first = ps[0] if ps else pr[0] if pr else None
    if first is None:
        return
    mine, theirs = (sends, recvs) if ps else (recvs, sends)
    if table.never_started(first.rank, table.p2p_state(first)):
        return  # its own stream has not reached it: not (yet) waiting on the peer
    if _whole(table, ch) and len(theirs) > mine.index(first):
        return  # the peer did post its half (eagerly finished): nothing is owed
    waiting, missing = (src, dst) if ps else (dst, src)
    out.stalls.append(_stall(where, ch, first, waiting=waiting, missing=missing))


def _whole(table: CallTable, ch: Channel) -> bool:
    dumps = [table.dumps.get(r) for r in ch[1:]]
    return all(d is not None and d.whole_history for d in dumps)


def _by_order(table: CallTable, ch: Channel, sends: list[FrEntry], recvs: list[FrEntry],
              out: P2pFindings) -> None:
    g, src, dst = ch
    where = table.membership.label(g)
    known = [table.dumps.get(r) for r in (src, dst)]
    if any(d is not None and not d.whole_history for d in known):
        log.debug("%s->%s on %r: a buffer wrapped and no states are kept; not matched",
                  src, dst, g)
        out.unmatched.update((e.rank, e.index) for e in (*sends, *recvs))
        return
    for send, recv in zip(sends, recvs):
        if _sizes(send) != _sizes(recv):
            out.mismatches.append(SizeMismatch(g, send, recv))
            break
    # Without states only a rank's newest call can be the one it is stuck in.
    if len(recvs) > len(sends):
        e = recvs[len(sends)]
        if _is_newest(table, e):
            out.stalls.append(_stall(where, ch, e, waiting=dst, missing=src))
    elif len(sends) > len(recvs):
        e = sends[len(recvs)]
        if _is_newest(table, e):
            out.stalls.append(_stall(where, ch, e, waiting=src, missing=dst))


def _is_newest(table: CallTable, e: FrEntry) -> bool:
    d = table.dumps[e.rank]
    return bool(d.entries) and d.entries[-1].index <= table.batch_end.get(
        (table.group(e), e.rank, e.p2p_seq), e).index


def _sizes(e: FrEntry) -> tuple:
    # send and recv both record their one tensor as input and output
    return (e.input_sizes or e.output_sizes, e.input_dtypes or e.output_dtypes)


def _stall(where: str, ch: Channel, e: FrEntry, waiting: int, missing: int,
           reason: str = "never_joined", named_by: FrEntry | None = None) -> Stall:
    """Rank ``waiting`` is inside its half ``e`` of a transfer and rank ``missing`` is not.

    The call is named from ``named_by``'s side (the waiting rank's by default): the summary of
    a rank that entered but never started its half names that half.
    """
    n = named_by or e
    direction = "from" if n.op == "recv" else "to"
    other = missing if n.rank == waiting else waiting
    return Stall(key=(ch[0], *ch[1:], e.index, e.rank), pg=ch[0], seq=e.p2p_seq, op=n.op,
                 waiting=frozenset({waiting}), missing=frozenset({missing}),
                 first_ns=e.time_created_ns, order={waiting: e.index},
                 label=f"{n.op} {direction} rank {other} on {where}", p2p=True, reason=reason)
