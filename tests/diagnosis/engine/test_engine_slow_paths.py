"""Localizing slow connections (comm_slow) on hand-built traces: six hosts, two per leaf, two
spines; an all-reduce ring 0>1>...>5>0 whose leaf-crossing hops take the spines given."""

from __future__ import annotations

import itertools

import numpy as np

from diagnosis.engine import Engine
from diagnosis.topology.builders import rail_optimized
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace

MS = 1_000_000
T0 = 1_000 * MS
ONSET = 20


def leaf(r: int) -> str:
    return f"leaf0{r // 2}r0"


def nic(r: int) -> str:
    return f"node00{r}/nic0"


def diagnose(tmp_path, spines: dict[int, str], slow_link: str, factor: float = 1.5):
    """``spines[s]``: the spine the hop from rank s crosses (hops inside a leaf cross none).
    From iteration ONSET the transfers crossing ``slow_link`` take ``factor`` times longer."""
    rng = np.random.default_rng(0)
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        for r in range(6):
            w.rank(r, f"node00{r}", gpu=f"node00{r}/gpu0", nic=nic(r))
        w.group("dp", list(range(6)))
        for it in range(40):
            t = T0 + it * 100 * MS
            durs = []
            for s in range(6):
                d = (s + 1) % 6
                hops = [nic(s), leaf(s)] + ([spines[s], leaf(d)] if s in spines else []) \
                    + [nic(d)]
                links = {"~".join(sorted(p)) for p in itertools.pairwise(hops)}
                dur = 8 * MS * np.exp(rng.normal(0, 0.02))
                if it >= ONSET and slow_link in links:
                    dur *= factor
                durs.append(dur)
                w.conn(s, d, 32 << 20, t, int(t + dur), pg="dp", seq=it, path=hops)
            for r in range(6):
                w.op(r, "dp", it, "all_reduce", 64 << 20, t, int(t + max(durs) + MS))
        w.end(T0 + 40 * 100 * MS)
    reports, _ = feed_trace(Engine(rail_optimized(6, 1, hosts_per_leaf=2, spines=2)), path)
    return reports


def test_single_flow_over_two_uplinks_names_both_equally(tmp_path):
    # only 1>2 crosses spine00: its two uplinks lie on exactly the same connections, and a slow
    # one at either end slows the same transfer; nothing can tell them apart, so both are named
    # with the same score
    reports = diagnose(tmp_path, {1: "spine00", 3: "spine01", 5: "spine01"},
                       "leaf00r0~spine00")
    assert [r.kind for r in reports] == ["comm_slow"]
    s = reports[0].suspects
    assert {(x.type, x.id) for x in s[:2]} == {("link", "leaf00r0~spine00"),
                                               ("link", "leaf01r0~spine00")}
    assert s[0].score == s[1].score
    assert reports[0].evidence["slow"] == ["1>2"]


def test_healthy_flow_clears_the_far_uplink(tmp_path):
    # 3>4 also crosses spine00 through leaf01's uplink and stays healthy: leaf00's uplink alone
    reports = diagnose(tmp_path, {1: "spine00", 3: "spine00", 5: "spine01"},
                       "leaf00r0~spine00")
    assert [r.kind for r in reports] == ["comm_slow"]
    s = reports[0].suspects
    assert (s[0].type, s[0].id) == ("link", "leaf00r0~spine00")
    assert ("link", "leaf01r0~spine00") not in [(x.type, x.id) for x in s]
