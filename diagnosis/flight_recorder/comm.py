"""Calls every member entered that never completed (comm_hang), and calls that failed.

Only groups whose backend reports completion (NCCL) can show a comm hang: on gloo every entry
stays ``scheduled``. Per group the earliest such call is the stuck one (the rest queue behind it
on the group's stream); for a send/recv, the first pair both ends are inside. With timing on,
an entry is ``started`` once its GPU kernel began: a call all members started and none finished
is a transfer that makes no progress. When no member reports starts (timing off), a call can
also stay open because a member's GPU is still busy with earlier work; if that member is
waiting in an earlier stalled call, that explains it and no comm hang is filed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from c4.report import FaultReport, Suspect
from diagnosis.flight_recorder.calls import CallTable, Key, Stall
from diagnosis.flight_recorder.p2p import PendingPair
from diagnosis.flight_recorder.parse import FrEntry
from diagnosis.flight_recorder.text import ranks

COMM_HANG_SCORE = 0.5
UNTIMED_COMM_HANG_SCORE = 0.4
STATE_ERROR_SCORE = 0.6
ERROR_STATES = frozenset({"error", "errored", "failed", "timeout", "timed_out", "timedout",
                          "aborted"})


@dataclass(frozen=True)
class CommHang:
    ranks: frozenset[int]
    label: str
    report: FaultReport


def find(t: CallTable, open_calls: dict[str, Key], pending_p2p: list[PendingPair],
         blocked: dict[int, tuple], stalls: dict[tuple, Stall]) -> list[CommHang]:
    """The stuck transfers among the calls every member entered and none finished:
    ``open_calls`` per group and ``pending_p2p`` are those calls; ``blocked`` is each rank's
    earliest stalled call among ``stalls`` (a call queued behind one is not stuck itself)."""
    out = []
    for pg, key in sorted(open_calls.items()):
        by_rank = t.calls[key]
        # a coalesced group speaks through its closing entry (its members carry no state)
        entries = {r: max(es, key=lambda e: (e.closes_group, -e.index))
                   for r, es in by_rank.items()}
        states = {r: t.state(r, key) for r in by_rank}
        stuck = {r: s for r, s in states.items() if s != "completed"}
        if _queued_behind(blocked, stalls, stuck, entries):
            continue
        ends = sorted({e.op for es in by_rank.values() for e in es if e.closes_group})
        op = ends[0] if ends else entries[min(entries)].op
        label = f"{op} #{key[1]} on {t.membership.label(pg)}"
        head = f"all {len(by_rank)} members of {t.membership.label(pg)} entered {op} #{key[1]}"
        out.append(_hang(t, stuck, entries, label, head, pg, key[1]))
    for p in pending_p2p:
        stuck = {p.send.rank: p.send_state, p.recv.rank: p.recv_state}
        entries = {p.send.rank: p.send, p.recv.rank: p.recv}
        if _queued_behind(blocked, stalls, stuck, entries):
            continue
        where = t.membership.label(p.pg)
        label = f"send from rank {p.send.rank} to rank {p.recv.rank} on {where}"
        head = (f"ranks {p.send.rank} and {p.recv.rank} are both inside the send from rank "
                f"{p.send.rank} to rank {p.recv.rank} on {where}")
        out.append(_hang(t, stuck, entries, label, head, p.pg, p.send.p2p_seq))
    return out


def _queued_behind(blocked: dict[int, tuple], stalls: dict[tuple, Stall],
                   stuck: dict[int, str], entries: dict[int, FrEntry]) -> bool:
    """Whether no member is known to be inside the call and one of them is waiting in a
    stalled call it entered before this one (its stream may never have reached this one)."""
    if any(s == "started" for s in stuck.values()):
        return False
    for r in stuck:
        key = blocked.get(r)
        entered = entries[r].index
        if key is not None and stalls[key].order.get(r, entered) < entered:
            return True
    return False


def _hang(t: CallTable, stuck: dict[int, str], entries: dict[int, FrEntry], label: str,
          head: str, pg: str, seq: int) -> CommHang:
    timed = any(s == "started" for s in stuck.values()) or bool(set(entries) & t.reports_starts)
    score = COMM_HANG_SCORE if timed else UNTIMED_COMM_HANG_SCORE
    summary = (f"{head} and it never completed on {ranks(stuck)}: the transfer itself is "
               "stuck; check the links and NICs between them")
    if not timed:
        summary += (" (no rank reports when its GPU began the call, NCCL timing being off: a "
                    "GPU still busy with earlier work would look the same)")
    timed_out = sorted(r for r in stuck if entries[r].retired)
    report = FaultReport(
        kind="comm_hang",
        suspects=tuple(Suspect(type="rank", id=str(r), rank=r, score=score)
                       for r in sorted(stuck)),
        first_seen_ns=min((e.time_created_ns for e in entries.values() if e.time_created_ns),
                          default=0),
        summary=summary, pg=pg, seq=seq,
        evidence={"states": {str(r): s for r, s in sorted(stuck.items())},
                  "timed_out": timed_out, "call": label})
    return CommHang(frozenset(stuck), label, report)


def state_errors(t: CallTable) -> list[FaultReport]:
    failed: dict[Key, dict[int, str]] = defaultdict(dict)
    for d in t.dumps.values():
        for e in d.entries:
            if e.state.lower() in ERROR_STATES:
                failed[(t.group(e), e.seq)][d.rank] = e.state
    reports = []
    for (pg, seq), by in sorted(failed.items()):
        calls = t.calls.get((pg, seq), {})
        op = next((e.op for es in calls.values() for e in es), "call")
        reports.append(FaultReport(
            kind="error",
            suspects=tuple(Suspect(type="rank", id=str(r), rank=r, score=STATE_ERROR_SCORE)
                           for r in sorted(by)),
            first_seen_ns=t.first_ns((pg, seq), by) or 0,
            summary=(f"{op} #{seq} on {t.membership.label(pg)} failed on {ranks(by)} "
                     f"(state {', '.join(sorted(set(by.values())))})"),
            pg=pg, seq=seq, evidence={"states": {str(r): s for r, s in by.items()}}))
    return reports
