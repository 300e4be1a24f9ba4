"""Who belongs to which process group, inferred from the dumps themselves.

torch's analyzer takes membership from ``pg_config`` and crashes when gloo leaves it empty.
Here the entries are the evidence: a rank that recorded a call on a group is a member of it;
every rank is a member of the default group; ``pg_config`` adds members only where every rank
that names the group agrees on its ranks and the entries do not contradict it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from diagnosis.flight_recorder.dumps import RankDump

log = logging.getLogger(__name__)

DEFAULT_PG_DESC = "default_pg"


@dataclass(frozen=True)
class Membership:
    """Group name -> member ranks, and the ranks whose dumps are missing."""

    members: dict[str, frozenset[int]]
    complete: frozenset[str]  # groups whose full membership is known (default group, pg_config)
    dumped: frozenset[int]  # ranks that left a dump
    undumped: frozenset[int]  # ranks known to exist (rank gaps, pg_config) without a dump

    def of(self, pg: str) -> frozenset[int]:
        return self.members.get(pg, frozenset())

    def is_complete(self, pg: str) -> bool:
        return pg in self.complete


def infer_membership(dumps: Sequence[RankDump]) -> Membership:
    seen: dict[str, set[int]] = defaultdict(set)
    default_pgs: set[str] = set()
    for d in dumps:
        for e in d.entries:
            seen[e.pg].add(d.rank)
            if e.pg_desc == DEFAULT_PG_DESC:
                default_pgs.add(e.pg)

    configs: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    for d in dumps:
        for name, ranks in d.pg_config.items():
            configs[name].add(ranks)
    trusted: dict[str, frozenset[int]] = {}
    for name, variants in configs.items():
        if len(variants) != 1:
            log.info("ranks disagree on the members of group %r in pg_config; ignoring it", name)
            continue
        ranks = frozenset(next(iter(variants)))
        if name in seen and not seen[name] <= ranks:
            log.info("pg_config says group %r is %s, but ranks %s recorded calls on it; "
                     "ignoring pg_config", name, sorted(ranks), sorted(seen[name] - ranks))
            continue
        trusted[name] = ranks

    dumped = frozenset(d.rank for d in dumps)
    known = set(dumped)
    for ranks in trusted.values():
        known |= ranks
    if default_pgs or trusted:
        # Ranks are numbered 0..world-1: a gap is a rank that left no dump.
        known |= set(range(max(known) + 1))
    members = {pg: frozenset(r) for pg, r in seen.items()}
    for name, ranks in trusted.items():
        members[name] = members.get(name, frozenset()) | ranks
    for pg in default_pgs:
        members[pg] = members[pg] | frozenset(known)
    return Membership(members=members, complete=frozenset(default_pgs | trusted.keys()),
                      dumped=dumped, undumped=frozenset(known - dumped))
