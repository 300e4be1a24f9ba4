"""Which process group each entry belongs to, and who its members are.

Two sources, trusted as far as they deserve:

* ``pg_config``: each rank lists the groups it constructed (name -> members). NCCL writes it
  correctly; gloo on torch 2.13 writes it empty or keyed by ``''`` with ranks ``'[]'``, which
  crashes torch's own analyzer. A group's config is used when every rank that names it agrees,
  each lists itself, and no rank outside it recorded calls on it.
* the entries: a rank that recorded a call on a group is a member; every rank is a member of
  the default group.

Group names are normally the same on every member (``new_group`` is called by all ranks), but
disjoint groups may share one (``split_group`` before it hashed its names, and torch's own
analyzer keys groups by name plus members for that reason). When ranks' configs give one name
disjoint member sets, each set is its own group, keyed ``name@r0,r1,...``.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from diagnosis.flight_recorder.parse import RankDump

log = logging.getLogger(__name__)

DEFAULT_PG_DESC = "default_pg"
_PEER = re.compile(r"^(\d+)\s*(->|<-)\s*(\d+)$")


@dataclass(frozen=True)
class Membership:
    """Group key -> member ranks, and the ranks whose dumps are missing."""

    members: dict[str, frozenset[int]]
    complete: frozenset[str]  # groups whose full membership is known (default group, pg_config)
    dumped: frozenset[int]  # ranks that left a dump
    undumped: frozenset[int]  # ranks known to exist (rank gaps, pg_config) without a dump
    default: frozenset[str] = frozenset()
    # (rank, recorded name) -> group key, where a name stands for several groups
    split: dict[tuple[int, str], str] = field(default_factory=dict)
    # group key -> {group-local rank: global rank}, learnt from send/recv entries
    locals_seen: dict[str, dict[int, int]] = field(default_factory=dict)

    def key(self, rank: int, name: str) -> str:
        return self.split.get((rank, name), name)

    def label(self, pg: str) -> str:
        """``process group '1'``; a name shared by several groups also gets the members."""
        if pg in self.split.values():
            name = pg.rpartition("@")[0]
            return f"process group {name!r} (ranks {', '.join(map(str, sorted(self.of(pg))))})"
        return f"process group {pg!r}"

    def of(self, pg: str) -> frozenset[int]:
        return self.members.get(pg, frozenset())

    def is_complete(self, pg: str) -> bool:
        return pg in self.complete

    def global_rank(self, pg: str, local: int) -> int | None:
        """The global rank of group-local rank ``local`` (send/recv name group-local ranks)."""
        seen = self.locals_seen.get(pg, {})
        if local in seen:
            return seen[local]
        if pg in self.default:
            return local
        if self.is_complete(pg):
            ranks = sorted(self.of(pg))  # new_group and split_group sort their members
            return ranks[local] if local < len(ranks) else None
        return None


def peer_ranks(peer: str) -> tuple[int, int] | None:
    """(src, dst) group-local ranks of ``"0->1"`` (a send) or ``"1<-0"`` (a recv)."""
    m = _PEER.match(peer.strip())
    if not m:
        return None
    a, arrow, b = int(m.group(1)), m.group(2), int(m.group(3))
    return (a, b) if arrow == "->" else (b, a)


def infer_membership(dumps: Sequence[RankDump]) -> Membership:
    split, split_members = _split_names(dumps)
    seen: dict[str, set[int]] = defaultdict(set)
    default_pgs: set[str] = set()
    any_default_desc = any(e.pg_desc == DEFAULT_PG_DESC for d in dumps for e in d.entries)
    for d in dumps:
        for e in d.entries:
            key = split.get((d.rank, e.pg), e.pg)
            seen[key].add(d.rank)
            # Before the description existed, the default group was the one named '0'.
            if e.pg_desc == DEFAULT_PG_DESC or (not any_default_desc and e.pg == "0"):
                default_pgs.add(key)

    trusted = dict(split_members)
    for name, ranks in _agreed_configs(dumps, split).items():
        if name in seen and not seen[name] <= ranks:
            log.info("pg_config says group %r is %s, but ranks %s recorded calls on it; "
                     "ignoring pg_config", name, sorted(ranks), sorted(seen[name] - ranks))
            continue
        trusted[name] = ranks

    dumped = frozenset(d.rank for d in dumps)
    known = set(dumped)
    for ranks in trusted.values():
        known |= ranks
    if (default_pgs or trusted) and known:
        # Ranks are numbered 0..world-1: a gap is a rank that left no dump.
        known |= set(range(max(known) + 1))
    members = {pg: frozenset(r) for pg, r in seen.items()}
    for name, ranks in trusted.items():
        members[name] = members.get(name, frozenset()) | ranks
    for pg in default_pgs:
        members[pg] = members[pg] | frozenset(known)
    return Membership(members=members, complete=frozenset(default_pgs | trusted.keys()),
                      dumped=dumped, undumped=frozenset(known - dumped),
                      default=frozenset(default_pgs), split=split,
                      locals_seen=_locals_seen(dumps, split))


def _configs(dumps: Sequence[RankDump]) -> dict[str, dict[tuple[int, ...], set[int]]]:
    """Group name -> member list -> the ranks whose pg_config gives that list."""
    out: dict[str, dict[tuple[int, ...], set[int]]] = defaultdict(lambda: defaultdict(set))
    for d in dumps:
        for name, ranks in d.pg_config.items():
            out[name][ranks].add(d.rank)
    return out


def _split_names(dumps: Sequence[RankDump]) -> tuple[dict[tuple[int, str], str],
                                                       dict[str, frozenset[int]]]:
    """Names that ranks' pg_configs give disjoint member sets, each set listing its reporters.

    Returns (rank, name) -> group key for every member of such a set, and group key -> members.
    """
    split: dict[tuple[int, str], str] = {}
    members: dict[str, frozenset[int]] = {}
    for name, variants in _configs(dumps).items():
        if len(variants) < 2:
            continue
        sets = [frozenset(v) for v in variants]
        disjoint = sum(len(s) for s in sets) == len(frozenset().union(*sets))
        self_listed = all(reporters <= set(v) for v, reporters in variants.items())
        if not (disjoint and self_listed):
            log.info("ranks disagree on the members of group %r in pg_config; ignoring it", name)
            continue
        for v in variants:
            key = f"{name}@{','.join(str(r) for r in v)}"
            members[key] = frozenset(v)
            for r in v:
                split[(r, name)] = key
    return split, members


def _agreed_configs(dumps: Sequence[RankDump],
                    split: dict[tuple[int, str], str]) -> dict[str, frozenset[int]]:
    split_names = {name for _, name in split}
    out = {}
    for name, variants in _configs(dumps).items():
        if name in split_names or len(variants) != 1:
            continue
        out[name] = frozenset(next(iter(variants)))
    return out


def _locals_seen(dumps: Sequence[RankDump],
                 split: dict[tuple[int, str], str]) -> dict[str, dict[int, int]]:
    """Group-local ranks known from the ranks' own send/recv entries ("send 2->5" by rank 9:
    local 2 is rank 9)."""
    out: dict[str, dict[int, int]] = defaultdict(dict)
    for d in dumps:
        for e in d.entries:
            if e.op not in ("send", "recv"):
                continue
            pair = peer_ranks(e.peer)
            if pair is not None:
                own = pair[0] if e.op == "send" else pair[1]
                out[split.get((d.rank, e.pg), e.pg)][own] = d.rank
    return dict(out)
