"""The replicas of a communicator (``diagnosis.engine.replicas``): the same-size communicators
sharing none of its ranks whose members meet its members in another collective, the nearest
``MAX_REPLICAS`` in index order; found within bounded memory when those other collectives are
huge (a data-parallel group of thousands)."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.replicas import _NEAR, MAX_REPLICAS, Replicas

TP, PP = 8, 4


def _job(dp: int) -> Arena:
    """Megatron's layout: rank ((d * PP) + p) * TP + t; tensor-parallel groups, then the
    data-parallel groups (``dp`` members each), then the pipelines."""
    a = Arena(8)
    rank = np.arange(dp * PP * TP).reshape(dp, PP, TP)
    groups = [(f"tp{d}.{p}", rank[d, p]) for d in range(dp) for p in range(PP)]
    groups += [(f"dp{p}.{t}", rank[:, p, t]) for p in range(PP) for t in range(TP)]
    groups += [(f"pp{d}.{t}", rank[d, :, t]) for d in range(dp) for t in range(TP)]
    for k, (name, members) in enumerate(groups):
        a.add_group(k, name, members)
    return a


def _by_definition(a: Arena, g: int) -> list[int]:
    comms: dict[int, set[int]] = {}
    for c, m in enumerate(a.members):
        for r in m.tolist():
            comms.setdefault(r, set()).add(c)
    mine = set(a.members[g].tolist())
    meet = set().union(*(comms[r] for r in mine)) - {g}
    out = [h for h in range(len(a.members))
           if h != g and a.n[h] == a.n[g] and not mine & set(a.members[h].tolist())
           and (set().union(*(comms[r] for r in a.members[h].tolist())) - {h}) & meet]
    return sorted(sorted(out, key=lambda h: (abs(h - g), h))[:MAX_REPLICAS])


def test_replicas_are_the_nearest_that_meet_in_another_collective():
    a = _job(dp=3 * _NEAR)          # data-parallel groups three times the bound
    reps = Replicas(a)
    groups = np.array([0, 1, 5, 100, 3 * _NEAR * PP - 1])   # tensor-parallel groups
    cnt, flat = reps.of(groups)
    got = np.split(reps.idx[flat], np.cumsum(cnt)[:-1])
    for g, mine in zip(groups.tolist(), got, strict=True):
        assert sorted(mine.tolist()) == _by_definition(a, g), g
    # a pipeline's members are replicas of the other pipelines (they meet in the
    # data-parallel groups); the data-parallel groups, of the other data-parallel groups
    dp0 = 3 * _NEAR * PP
    cnt, flat = reps.of(np.array([dp0]))
    assert sorted(reps.idx[flat].tolist()) == _by_definition(a, dp0)
