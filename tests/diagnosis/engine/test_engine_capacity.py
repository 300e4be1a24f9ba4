"""Connections of a job on one switch, slow from their first transfer on: every connection
crosses the switch, so no peer is faster and only the capacity of the links tells a slow switch
from a healthy one. Eight hosts on ``switch0`` at 100 Gbit/s; an all-reduce ring 0>1>...>7>0
every 200 ms, one flow per NIC each way."""

from __future__ import annotations

import numpy as np

from c4.topology.builders import single_switch
from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace
from tests.support.engine_builders import lockstep, nic, one_rank_hosts

MS = 1_000_000
T0 = 1_000 * MS
HOSTS = 8
GBPS = 100.0
RING = [(s, (s + 1) % HOSTS) for s in range(HOSTS)]


def diagnose(tmp_path, nbytes: int, efficiency: float, slow: dict[str, float] | None = None,
             iterations: int = 40):
    """Each transfer moves ``nbytes`` at ``efficiency`` of the NIC's rate (plus 10 us of
    latency), ``slow[link]`` times longer across a slow link."""
    rng = np.random.default_rng(0)
    path = tmp_path / "trace.jsonl"
    slow = slow or {}
    with TraceWriter(path) as w:
        one_rank_hosts(w, HOSTS)
        w.group("dp", list(range(HOSTS)))
        for it in range(iterations):
            t = T0 + it * 200 * MS
            ends = []
            for s, d in RING:
                hops = [nic(s), "switch0", nic(d)]
                factor = max([slow.get(f"{nic(r)}~switch0", 1.0) for r in (s, d)]
                             + [slow.get("switch0", 1.0)])
                wire = nbytes * 8 / GBPS / efficiency
                dur = (wire + 10_000) * factor * np.exp(rng.normal(0, 0.03))
                ends.append(int(t + dur))
                w.conn(s, d, nbytes, t, ends[-1], pg="dp", seq=it, path=hops)
            lockstep(w, "dp", it, "all_reduce", 2 * nbytes, np.full(HOSTS, t), max(ends) + MS)
        w.end(T0 + iterations * 200 * MS)
    reports, _ = feed_trace(Engine(single_switch(HOSTS, 1, nic_gbps=GBPS)), path)
    return reports


def test_a_switch_slow_since_the_start_is_named_against_the_links_capacity(tmp_path):
    # every flow moves at 45% of what its link is built for: the one switch they all cross
    reports = diagnose(tmp_path, 32 << 20, 0.9, slow={"switch0": 2.0})
    assert [r.kind for r in reports] == ["comm_slow"]
    r = reports[0]
    assert (r.suspects[0].type, r.suspects[0].id) == ("switch", "switch0")
    assert "capacity of the links" in r.summary
    assert r.evidence["slow_count"] == HOSTS
    assert 1.9 < r.evidence["slowdown"] < 2.6


def test_a_healthy_job_near_its_links_capacity_is_no_fault(tmp_path):
    assert diagnose(tmp_path, 32 << 20, 0.85) == []


def test_short_transfers_are_timed_by_latency_not_judged_against_capacity(tmp_path):
    # 64 KiB take 5 us on the wire and 10 us to start: far below the rate, and no fault
    assert diagnose(tmp_path, 64 << 10, 0.4) == []


def test_one_slow_cable_is_named_against_its_peers_not_the_switch(tmp_path):
    reports = diagnose(tmp_path, 32 << 20, 0.9, slow={f"{nic(3)}~switch0": 1.8})
    assert [r.kind for r in reports] == ["comm_slow"]
    r = reports[0]
    assert {(s.type, s.id) for s in r.suspects[:2]} == {("nic", nic(3)),
                                                        ("link", f"{nic(3)}~switch0")}
    assert "than their peers" in r.summary

