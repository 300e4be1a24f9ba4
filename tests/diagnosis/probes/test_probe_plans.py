"""Probe plans' decisions (pairwise, bisection, topology expectation) and how verdicts re-score a
fault report. The plans are judged here against a TABLE PROBER: an in-memory backend that
answers from a table of per-host bandwidths (the slowest member sets a test's bandwidth, a
"dead" host makes it fail), so that each decision is checked exactly; the real probes run the
same plans in test_probe_gloo.py and test_probe_lab.py."""

from __future__ import annotations

import pytest

from c4.report import FaultReport, Suspect
from c4.topology import rail_optimized, single_switch
from diagnosis.probes.adjust import apply_probes, host_of_suspect
from diagnosis.probes.api import ProbeError, ProbeHost, ProbeResult
from diagnosis.probes.plans import (
    CLEARED,
    CONFIRMED,
    INCONCLUSIVE,
    PlanConfig,
    Verdict,
    bisect,
    expected_busbw,
    pairwise,
)


class TableProber:
    """Answers from ``speed`` (GB/s per host; None: the host hangs)."""

    name = "table"

    def __init__(self, speed: dict[str, float | None]) -> None:
        self.speed = speed
        self.calls: list[tuple[str, ...]] = []

    def _run(self, op: str, hosts: list[ProbeHost]) -> ProbeResult:
        ids = tuple(h.id for h in hosts)
        self.calls.append(ids)
        speeds = [self.speed[i] for i in ids]
        if any(s is None for s in speeds):
            return ProbeResult(op, ids, self.name, False, error="timed out after 60.0 s")
        return ProbeResult(op, ids, self.name, True, 1 << 20, min(speeds), min(speeds))

    def pair(self, a: ProbeHost, b: ProbeHost) -> ProbeResult:
        return self._run("sendrecv", [a, b])

    def group(self, hosts: list[ProbeHost]) -> ProbeResult:
        return self._run("all_reduce", hosts)


def hosts(n: int) -> list[ProbeHost]:
    return [ProbeHost(f"node{i:03d}") for i in range(n)]


def table(n: int, slow: dict[int, float | None] | None = None) -> TableProber:
    speed: dict[str, float | None] = {f"node{i:03d}": 10.0 for i in range(n)}
    for i, s in (slow or {}).items():
        speed[f"node{i:03d}"] = s
    return TableProber(speed)


def test_pairwise_confirms_a_slow_suspect_and_clears_a_healthy_one():
    hs = hosts(4)
    v = pairwise(table(4, {0: 2.0}), hs[0], hs[1:])
    assert v.status == CONFIRMED and v.measured_GBps == 2.0 and v.reference_GBps == 10.0
    assert "slow with node001, node002, node003" in v.reason and len(v.results) == 4
    v = pairwise(table(4, {3: 2.0}), hs[0], hs[1:3])
    assert v.status == CLEARED and "no slower than its peers" in v.reason


def test_pairwise_hang_confirms_and_a_slow_peer_is_only_inconclusive():
    hs = hosts(4)
    v = pairwise(table(4, {0: None}), hs[0], hs[1:3])
    assert v.status == CONFIRMED and "timed out" in v.reason and v.measured_GBps == 0.0
    # the suspect is fine with node001, slow with node003: blame is not the suspect's alone
    v = pairwise(table(4, {3: 1.0}), hs[0], [hs[1], hs[3], hs[2]], config=PlanConfig(
        baseline_pairs=1))
    assert v.status == INCONCLUSIVE and "slow only with node003" in v.reason


def test_pairwise_needs_a_reference():
    hs = hosts(2)
    v = pairwise(table(2, {0: 1.0}), hs[0], hs[1:])
    assert v.status == INCONCLUSIVE and "nothing to compare with" in v.reason
    topo = single_switch(2, nic_gbps=80)  # 80 Gbit/s = 10 GB/s
    v = pairwise(table(2, {0: 1.0}), hs[0], hs[1:], topology=topo)
    assert v.status == CONFIRMED and v.expected_GBps == pytest.approx(10.0)
    with pytest.raises(ProbeError, match="no peer"):
        pairwise(table(2), hs[0], [hs[0]])


def test_bisect_finds_one_slow_host_among_eight_in_few_steps():
    prober = table(8, {5: 1.0})
    out = bisect(prober, hosts(8))
    assert out.culprits == ("node005",)
    status = {v.host: v.status for v in out.verdicts}
    assert status["node005"] == CONFIRMED
    assert all(s == CLEARED for h, s in status.items() if h != "node005")
    # halves of 4, then of 2, then one pair per candidate: 2 + 2 + 2
    assert len(prober.calls) == 6, prober.calls
    assert out.to_json()["culprits"] == ["node005"]


def test_bisect_two_slow_hosts_in_different_halves():
    # with every half slow, only the links' expectation says that 1 GB/s is slow
    topo = single_switch(8, nic_gbps=80)
    out = bisect(table(8, {1: 1.0, 6: None}), hosts(8), topology=topo)
    assert set(out.culprits) == {"node001", "node006"}
    out = bisect(table(8, {1: 1.0, 6: None}), hosts(8))
    assert out.culprits == ("node006",)


def test_bisect_small_sets():
    # three hosts, nobody known good: all three pairs, the host in both slow pairs
    prober = table(3, {2: 1.0})
    out = bisect(prober, hosts(3))
    assert out.culprits == ("node002",) and len(prober.calls) == 3
    # two hosts cannot be told apart without a known-good one
    out = bisect(table(3, {1: 1.0}), hosts(2))
    assert out.culprits == () and {v.status for v in out.verdicts} == {INCONCLUSIVE}
    hs = hosts(3)
    out = bisect(table(3, {1: 1.0}), hs[:2], known_good=[hs[2]])
    assert out.culprits == ("node001",)
    with pytest.raises(ProbeError):
        bisect(table(1), hosts(1))


def test_bisect_with_topology_stops_when_the_whole_set_is_fast_enough():
    topo = single_switch(8, nic_gbps=80)
    prober = table(8)
    out = bisect(prober, hosts(8), topology=topo)
    assert out.culprits == () and len(prober.calls) == 1 and "no slow host" in out.reason
    prober = table(8, {7: 2.0})
    out = bisect(prober, hosts(8), topology=topo)
    assert out.culprits == ("node007",)
    assert all(v.expected_GBps == pytest.approx(10.0) for v in out.verdicts)


def test_expected_busbw_from_link_capacities():
    topo = rail_optimized(4, gpus_per_host=8, rails=2, hosts_per_leaf=2, spines=1,
                          nic_gbps=400, uplink_gbps=200)
    # same leaf: two rails of 400 Gbit/s
    assert expected_busbw(topo, ["node000", "node001"]) == pytest.approx(800 / 8)
    # across leaves: each rail limited by its 200 Gbit/s uplink
    assert expected_busbw(topo, ["node000", "node002"]) == pytest.approx(400 / 8)
    assert expected_busbw(topo, ["node000", "node001", "node002"]) == pytest.approx(400 / 8)
    assert expected_busbw(topo, ["node000", "nodeX"]) is None
    assert expected_busbw(None, ["node000", "node001"]) is None


def _report() -> FaultReport:
    return FaultReport("comm_slow", (
        Suspect("nic", "node001/nic0", 0.6),
        Suspect("link", "leaf00~node002/nic0", 0.7),
        Suspect("switch", "spine0", 0.3),
        Suspect("rank", "5", 0.4, rank=5),
    ), 1, "transfers to node001 are slow")


def test_apply_probes_boosts_confirmed_and_drops_cleared_suspects():
    verdicts = [Verdict("node001", CONFIRMED, "slow"), Verdict("node002", CLEARED, "fine")]
    out = apply_probes(_report(), verdicts)
    assert [(s.type, s.id) for s in out.suspects] == [
        ("nic", "node001/nic0"), ("rank", "5"), ("switch", "spine0")]
    assert out.suspects[0].score == pytest.approx(0.8)
    assert "probes confirmed nic node001/nic0" in out.summary
    assert "probes cleared link leaf00~node002/nic0" in out.summary
    assert [p["host"] for p in out.evidence["probes"]] == ["node001", "node002"]
    out.to_json()  # still a valid report document


def test_apply_probes_places_ranks_with_a_mapping():
    verdicts = [Verdict("node003", CLEARED, "fine")]
    out = apply_probes(_report(), verdicts,
                       host_of=lambda s: host_of_suspect(s, {5: "node003"}))
    assert "5" not in [s.id for s in out.suspects]
    # an unplaced rank is kept
    assert "5" in [s.id for s in apply_probes(_report(), verdicts).suspects]
