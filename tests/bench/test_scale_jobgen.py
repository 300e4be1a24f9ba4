"""The large-job generator of bench/scale ships what sidecars would: exactly the sampled calls
with every member, progress that matches the calls, linkstat whose every row the daemon can
pair, and a planted stop that looks like one."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from bench.scale.jobgen import NS, JobGen, JobShape
from c4.proto import c4_pb2
from c4.proto.codec import collector_counts, concat
from c4.proto.sampling import is_sampled
from diagnosis.daemon.linkstats import LinkStatResolver

T0 = 10**18


def _gen(k: int = 8) -> JobGen:
    g = JobGen(JobShape(ranks=32, streams=3), T0)
    g.sampling.apply(c4_pb2.SampleSchedule(version=1, default_sample=k, steps=[
        c4_pb2.SampleStep(pg="tp1", from_seq=450, sample=2)]))
    return g


def test_op_rows_are_the_sampled_calls_with_every_member():
    g = _gen()
    parts = [p for s in range(3) for p in g.ops(T0 + s * NS, T0 + (s + 1) * NS) if p is not None]
    cols = concat(parts)
    names = np.asarray(cols.strings, dtype=object)
    calls: dict[tuple[str, int, str], set[int]] = defaultdict(set)
    for pg, seq, op, rank in zip(names[cols["pg"]], cols["seq"].tolist(),
                                 names[cols["op"]], cols["rank"].tolist(), strict=True):
        calls[(pg, seq, op)].add(rank)
    for pg, seq, _op in calls:
        k = 2 if pg == "tp1" and seq >= 450 else 8
        assert is_sampled(pg, seq, k), (pg, seq)
    tp0 = sorted(seq for pg, seq, _ in calls if pg == "tp0")
    assert tp0 == [q for q in range(900) if is_sampled("tp0", q, 8)]
    assert calls[("tp0", tp0[0], "all_reduce")] == set(range(8))
    dp = [ranks for (pg, _, _), ranks in calls.items() if pg == "dp3"]
    assert dp and all(r == {3, 11, 19, 27} for r in dp)
    sends = {(pg, seq): r for (pg, seq, op), r in calls.items() if op == "send"}
    recvs = {(pg, seq): r for (pg, seq, op), r in calls.items() if op == "recv"}
    assert sends.keys() == recvs.keys() and sends


def test_progress_follows_the_calls_and_linkstat_pairs_up():
    g = _gen()
    p = concat([g.progress(i, T0 + 2 * NS) for i in range(3)])
    names = np.asarray(p.strings, dtype=object)
    tp = (names[p["pg"]] == "tp0") & (p["rank"] == 5)
    assert p["entered"][tp].tolist() == [2 * 300 - 1]
    assert len(p) == 32 * 2 + 2 * 3 * 8    # tp, dp per rank; pp both ways between 4 nodes
    assert g.progress(0, T0 + 2 * NS) is None, "unchanged: not sent again"
    res = LinkStatResolver()
    got = [res.add(g.linkstat(i, T0 + NS, NS), now=0.0) for i in range(3)]
    assert res.waiting() == 0 and res.dropped == 0
    pairs = {(a, b) for recs in got for a, b in zip(recs.src.tolist(), recs.dst.tolist())}
    assert (0, 1) in pairs and (1, 0) in pairs and (3, 11) in pairs and (11, 3) in pairs


def test_a_planted_stop():
    g = _gen(k=1)
    f = g.plant(rank=13, t_ns=T0 + 2 * NS + NS // 2)
    rows = concat([p for p in g.ops(T0 + 2 * NS, T0 + 3 * NS) if p is not None])
    mine = rows["rank"] == 13
    assert len(rows) and (rows["t_enter_ns"][mine] < f.t_ns).all()
    stuck = rows["t_end_ns"] < 0
    assert sorted(rows["rank"][stuck].tolist()) == [8, 9, 10, 11, 12, 14, 15]
    p = concat([x for i in range(3) if (x := g.progress(i, T0 + 3 * NS)) is not None])
    assert 13 not in p["rank"].tolist()
    names = np.asarray(p.strings, dtype=object)
    waiting = (names[p["pg"]] == "tp1") & (p["entered"] > p["completed"])
    assert sorted(p["rank"][waiting].tolist()) == [8, 9, 10, 11, 12, 14, 15]
    stats = collector_counts(g.stats(1, T0 + 3 * NS))
    assert stats and all(13 not in cols["rank"].tolist() for _, _, cols in stats)
    assert 12 in stats[0][2]["rank"].tolist()


def test_a_stream_s_batches_carry_only_the_names_they_use():
    """One stream stands for hundreds of nodes: its linkstat batches are cut so that each
    carries only its own names (the daemon refuses a batch of more than 65,536), and joined
    again they are the rows sent."""
    from bench.scale.job import _slices

    g = _gen()
    ls = g.linkstat(0, T0 + NS, NS)
    parts = list(_slices(ls, 7))
    assert sum(len(p) for p in parts) == len(ls) and all(len(p) <= 7 for p in parts)
    for p in parts:
        used = np.unique(np.r_[p["local"], p["remote"]])
        assert (used == np.arange(len(p.strings))).all(), "every name used, none more"
    joined = concat(parts)
    for col in ("local", "remote"):
        assert joined.names(col).tolist() == ls.names(col).tolist()


def test_a_stream_of_one_node_ships_linkstat_with_integer_endpoints():
    """One stream per node (bench.scale.job --relays): the last node has no next stage, and its
    endpoint columns must stay integers for the batches to be cut."""
    g = JobGen(JobShape(ranks=32, streams=4), T0)
    for s in range(4):
        cols = g.linkstat(s, T0 + NS, NS)
        assert cols is not None and len(cols)
        for k in ("src", "dst", "local", "remote"):
            assert cols[k].dtype.kind == "i", (s, k, cols[k].dtype)
