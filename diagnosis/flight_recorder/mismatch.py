"""Mismatched calls: members that recorded different operations, sizes or dtypes at one call.

The culprits are the ranks that disagree with the majority, not (as a reference-rank comparison
would have it) everyone who disagrees with rank 0. A coalesced group is compared as a whole:
the sequence of its members and its closing entry. A send and its receive must carry the same
tensor; with two ranks there is no majority and both are named.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from c4.report import FaultReport, Suspect
from diagnosis.flight_recorder.calls import CallTable, Key
from diagnosis.flight_recorder.p2p import SizeMismatch
from diagnosis.flight_recorder.parse import FrEntry
from diagnosis.flight_recorder.text import ranks

# Calls whose per-rank sizes legitimately differ: compare only what every member shares.
_ONLY_OP = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "all_gather_v",
                      "reduce_scatter_v", "barrier", "split", "new_window"})
_INPUT_ONLY = frozenset({"gather"})
_OUTPUT_ONLY = frozenset({"scatter"})

MISMATCH_SCORE = 0.9
TIE_SCORE = 0.5


def mismatches(table: CallTable) -> tuple[list[FaultReport], set[Key]]:
    """One report per group (its first mismatched call), and every mismatched call."""
    skip = _cut_groups(table)
    first: dict[str, tuple[int, dict[int, tuple]]] = {}
    later: Counter[str] = Counter()
    keys: set[Key] = set()
    for key, by_rank in table.calls.items():
        pg, seq = key
        sigs = {r: tuple(signature(e) for e in sorted(es, key=lambda e: e.index))
                for r, es in by_rank.items() if (r, key) not in skip}
        if len(sigs) < 2 or len(set(sigs.values())) < 2:
            continue
        keys.add(key)
        if pg not in first or seq < first[pg][0]:
            if pg in first:
                later[pg] += 1
            first[pg] = (seq, sigs)
        else:
            later[pg] += 1
    reports = [_report(table, pg, seq, sigs, later[pg])
               for pg, (seq, sigs) in sorted(first.items())]
    reports.sort(key=lambda r: (r.first_seen_ns, r.pg or ""))
    return reports, keys


def _cut_groups(table: CallTable) -> set[tuple[int, Key]]:
    """(rank, call) of the oldest call in a wrapped buffer: the ring may have cut a coalesced
    group in two, keeping only its last members, so it is not compared."""
    out = set()
    for d in table.dumps.values():
        if d.whole_history:
            continue
        e = next((e for e in d.entries if not e.is_p2p), None)
        if e is not None:
            out.add((d.rank, (table.group(e), e.seq)))
    return out


def p2p_mismatch_reports(table: CallTable, found: list[SizeMismatch]) -> list[FaultReport]:
    out = []
    for m in found:
        s, r = m.send, m.recv
        where = table.membership.label(m.pg)
        out.append(FaultReport(
            kind="error",
            suspects=tuple(Suspect(type="rank", id=str(x), rank=x, score=TIE_SCORE)
                           for x in sorted({s.rank, r.rank})),
            first_seen_ns=min((t for t in (s.time_created_ns, r.time_created_ns) if t),
                              default=0),
            summary=(f"rank {s.rank} sends {_describe((signature(s),))} to rank {r.rank}, "
                     f"which receives {_describe((signature(r),))} on {where}: one of them "
                     "passes the wrong tensor"),
            pg=m.pg, seq=s.p2p_seq,
            evidence={"send": {"rank": s.rank, "p2p_seq": s.p2p_seq, "call": s.label},
                      "recv": {"rank": r.rank, "p2p_seq": r.p2p_seq, "call": r.label}}))
    return out


def signature(e: FrEntry) -> tuple:
    if e.op in _ONLY_OP or e.closes_group:
        return (e.op,)
    if e.op in _INPUT_ONLY:
        return (e.op, e.input_sizes, e.input_dtypes)
    if e.op in _OUTPUT_ONLY:
        return (e.op, e.output_sizes, e.output_dtypes)
    if e.op in ("send", "recv"):
        return ("tensor", e.input_sizes or e.output_sizes, e.input_dtypes or e.output_dtypes)
    return (e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes)


def _report(table: CallTable, pg: str, seq: int, sigs: dict[int, tuple],
            later: int) -> FaultReport:
    counts = Counter(sigs.values())
    ranked = counts.most_common()
    tie = len(ranked) > 1 and ranked[0][1] == ranked[1][1]
    majority = ranked[0][0]
    odd = sorted(r for r, s in sigs.items() if s != majority)
    where = f"call #{seq} on {table.membership.label(pg)}"
    if tie:
        suspects = [Suspect(type="rank", id=str(r), rank=r, score=TIE_SCORE)
                    for r in sorted(sigs)]
        summary = (f"ranks disagree at {where} with no majority: "
                   + "; ".join(f"{ranks(rs)} called {_describe(sig)}"
                               for sig, rs in _by_signature(sigs)))
    else:
        suspects = [Suspect(type="rank", id=str(r), rank=r, score=MISMATCH_SCORE) for r in odd]
        summary = (f"{ranks(odd)} called "
                   + " / ".join(_describe(sigs[r]) for r in _unique(odd, sigs))
                   + f" where {ranks(r for r, s in sigs.items() if s == majority)} called "
                   + f"{_describe(majority)} ({where})")
    evidence = {
        "calls": {_describe(sig): rs for sig, rs in _by_signature(sigs)},
        "majority": None if tie else _describe(majority),
        "later_mismatched_calls": later,
    }
    return FaultReport(kind="error", suspects=tuple(suspects),
                       first_seen_ns=table.first_ns((pg, seq), sigs) or 0, summary=summary,
                       pg=pg, seq=seq, evidence=evidence)


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


def _unique(odd: list[int], sigs: dict[int, tuple]) -> list[int]:
    seen: set[tuple] = set()
    out = []
    for r in odd:
        if sigs[r] not in seen:
            seen.add(sigs[r])
            out.append(r)
    return out
