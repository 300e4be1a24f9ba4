"""The replicas of a communicator (``diagnosis.engine.replicas``): the same-size communicators
sharing none of its ranks whose members meet its members in another collective, the nearest
``MAX_REPLICAS`` in index order; found within bounded memory when those other collectives are
huge (a data-parallel group of thousands). And their time over a span read off their kept
calls pooled, with one call in 64 kept (``pooled_time``)."""

from __future__ import annotations

import numpy as np

from diagnosis.engine.arena import Arena
from diagnosis.engine.replicas import (
    _NEAR,
    MAX_REPLICAS,
    KeptCalls,
    Replicas,
    pooled_time,
    replica_time,
)

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


def _kept(a: Arena, groups: list[int], behind: dict[int, float], seed: int) -> KeptCalls:
    """One call in 64 of each group kept at random over 20 iterations of 640 calls, 2 ms a
    call, every replica in step but ``behind[g]`` seconds late at every call."""
    rng = np.random.default_rng(seed)
    calls = KeptCalls()
    for g in groups:
        s = np.flatnonzero(rng.random(20 * 640) < 1 / 64)
        t = s * 2_000_000 + int(behind.get(g, 0.0) * 1e9) + rng.normal(0, 20_000, len(s))
        calls.add(np.full(len(s), g), s, t.astype(np.int64))
    return calls


def test_the_pooled_time_of_replicas_leaves_out_one_far_behind():
    """With one call in 64 kept, a replica's own kept calls lie too far apart to read its
    time at a sequence number off them; pooled with the others' they do not. A replica
    100 ms behind the others (a slow host's) is left out: else a span that starts at another
    replica's call and ends at its own seems 100 ms longer."""
    a = _job(dp=16)
    reps = Replicas(a)
    _, flat = reps.of(np.array([0]))       # a tensor-parallel group of stage 0
    mine = reps.idx[flat].tolist()
    s1 = np.arange(1000, 12000, 500)
    s2 = s1 + 128
    for behind in ({}, {mine[0]: 0.1}):
        calls = _kept(a, [0, *mine], behind, seed=4)
        took, count = pooled_time(reps, calls, np.zeros(len(s1), dtype=np.int64), s1, s2, 64)
        assert (count == len(mine)).all()
        # 128 calls of 2 ms: within the jitter and the spread of interpolating over a few calls
        assert np.isfinite(took).all()
        assert np.abs(took / 1e6 - 256.0).max() < 1.0, behind
    # their own kept calls, one replica at a time, reach few of these spans
    own, _ = replica_time(reps, _kept(a, [0, *mine], {}, seed=4), np.zeros(len(s1), np.int64),
                          s1, s2)
    assert np.isnan(own).mean() > 0.5
