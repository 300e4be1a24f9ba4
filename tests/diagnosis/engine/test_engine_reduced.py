"""The engine on reduced telemetry (trace format version 2): simulated jobs written as the edge
would ship them (one call in K kept, progress, linkstat, NIC port records), analysed through the
trace reader; each fault found and named as on the full trace, healthy runs silent."""

from __future__ import annotations

import itertools
import json

import pytest

from c4.topology import Topology
from diagnosis.engine import Engine
from diagnosis.engine.config import EngineConfig
from diagnosis.sim import simulate
from tests.support.engine_builders import sim_config, simulate_and_diagnose
from tests.support.replay import replay_live

# a small job at a realistic call rate: 64 GPUs, TP 8 x PP 4 x DP 2, 8 layers per stage
BASE = dict(gpus=64, iterations=24, microbatches=2, layers=8, seed=5)


def analyse(tmp_path, sample: int, *faults: str, **kw):
    return simulate_and_diagnose(tmp_path, sim_config(BASE, faults, sample=sample, **kw))


def named(reports, fault) -> bool:
    """A report of the expected kind whose top suspect is an accepted component."""
    accept = {(a["type"], a["id"]) for a in fault["accept"]}
    for r in reports:
        if r.kind == fault["expected_report"] and r.suspects:
            top = r.suspects[0]
            if (top.type, top.id) in accept or (top.rank is not None and
                                                ("rank", str(top.rank)) in accept):
                return True
    return False


@pytest.mark.parametrize("fault", ["rank_hang:auto@12", "dead_link:cable@12",
                                   "dead_nic:auto@12", "comm_hang:auto@12", "error:auto@12",
                                   "slow_gpu:auto@10,slow=2", "slow_nic:auto@10,slow=2.5"])
def test_each_fault_is_named_from_the_reduced_stream(tmp_path, fault):
    reports, truth, stats = analyse(tmp_path, 16, fault)
    assert stats.sample == 16 and stats.progress > 0
    f = truth["faults"][0]
    assert named(reports, f), [(r.kind, r.suspects[:2], r.summary) for r in reports]
    others = [r for r in reports if r.kind != f["expected_report"]]
    assert not others, [(r.kind, r.summary) for r in others]


def test_a_dead_uplink_is_named_before_the_switches_at_its_ends(tmp_path):
    """The stuck transfers' paths share the uplink and both its switches, and one-second
    windows cannot say which of them went silent first (with per-transfer records the uplink's
    last transfer ended before the switches' last ones did). Many of the switches' other
    connections finished in the window of the stop with nothing left in flight, each less
    likely had a switch died; every connection across the uplink in that window stuck."""
    reports, truth, _ = analyse(tmp_path, 16, "dead_link:uplink@12", gpus=128, seed=4,
                                hosts_per_leaf=4)
    f = truth["faults"][0]
    hang = [r for r in reports if r.kind == "comm_hang"]
    assert hang, [(r.kind, r.summary) for r in reports]
    top = hang[0].suspects[0]
    assert (top.type, top.id) == (f["component"]["type"], f["component"]["id"]), \
        [(s.type, s.id, s.score) for s in hang[0].suspects[:4]]
    assert hang[0].suspects[1].score < top.score


def test_a_slow_host_is_named_by_its_groups_pace(tmp_path):
    """Every GPU of the host slower: none of them is late inside its tensor-parallel group, but
    that group's pace between kept calls falls behind the other groups'. (It takes a job with
    enough groups to compare and seconds of buckets after the onset.)"""
    reports, truth, _ = analyse(tmp_path, 16, "slow_host:auto@12,slow=1.5", gpus=128,
                                iterations=40, layers=16)
    assert named(reports, truth["faults"][0]), [(r.kind, r.summary) for r in reports]
    assert len(reports) == 1


def test_a_host_slow_from_the_first_iteration_is_named_against_the_peers_of_its_role(tmp_path):
    """No healthy past of its own: its group's pace is compared with the other data-parallel
    replicas of its stage, in every bucket since the first."""
    reports, truth, _ = analyse(tmp_path, 16, "slow_host:auto@0,slow=2", gpus=128,
                                iterations=40, layers=16)
    assert named(reports, truth["faults"][0]), [(r.kind, r.summary) for r in reports]
    assert len(reports) == 1


@pytest.mark.parametrize("sample", [16, 64])
def test_the_stages_a_slow_gpu_holds_back_are_not_filed_once_its_onset_has_aged(tmp_path,
                                                                                  sample):
    """A slow GPU holds back its tensor-parallel group (its host), and that host every stage
    its pipelines feed: their ranks come late to their data-parallel calls. Two minutes on,
    when the rings hold nothing from before the onset, those ranks are late as a level of
    their own; they are the slow group's victims, not faults (the old code filed a GPU of the
    next stage and the host of the one after; at K = 64, where no group's pace is judged, that
    host)."""
    reports, truth, _ = analyse(tmp_path, sample, "slow_gpu:auto@5,slow=1.5", gpus=128,
                                iterations=150, layers=16, seed=5)
    assert named(reports, truth["faults"][0]), [(r.kind, r.summary) for r in reports]
    assert len(reports) == 1, [(r.kind, r.summary) for r in reports]


def test_a_healthy_reduced_run_files_nothing(tmp_path):
    reports, _, stats = analyse(tmp_path, 16)
    assert stats.linkstats > 0 and stats.ports > 0
    assert reports == []


def test_a_healthy_reduced_run_fed_live_files_nothing(tmp_path):
    """Fed as the live daemon takes it (small batches, a pass after each). Once its buckets
    follow the iterations, the groups' paces spread wider than in the first seconds; noise
    pooled over the whole ring took one group's lasting few percent for a slow host."""
    res = simulate(sim_config(BASE, (), sample=16), tmp_path)
    assert replay_live(Engine(Topology.load(res.topology)), res.trace, tail_s=5.0) == []


def test_a_call_left_out_of_the_sample_still_shows_who_never_came(tmp_path):
    """The hung rank's call is almost surely not a kept one: only progress records show it."""
    reports, truth, _ = analyse(tmp_path, 64, "rank_hang:auto@12")
    assert named(reports, truth["faults"][0])
    hang = next(r for r in reports if r.kind == "noncomm_hang")
    assert hang.first_seen_ns >= truth["faults"][0]["onset_ns"]


def test_ports_name_a_dead_nic_that_timing_leaves_tied(tmp_path):
    """Without port records a single stuck transfer leaves its two NICs (and cables) tied at
    window granularity; the port that went down names it."""
    reports, _, _ = analyse(tmp_path, 16, "dead_nic:auto@12")
    hang = next(r for r in reports if r.kind == "comm_hang")
    assert "port down" in hang.summary
    assert hang.suspects[0].score > max(s.score for s in hang.suspects
                                        if s.type == "nic" and s.id != hang.suspects[0].id)


def test_lengthened_windows_space_the_slow_detectors_and_the_fault_is_still_named(tmp_path):
    """A job whose windows the daemon lengthened to 4 s: its slow detectors judge at most
    every 2 s (half a window) however often the engine is advanced, the ranks and a fresh
    window of connections never in the same pass (at 100k+ ranks each takes a second), and
    the slow GPU is named no more than that later than when they judge at every advance."""
    res = simulate(sim_config(BASE, ("slow_gpu:auto@10,slow=2",), sample=16), tmp_path)
    truth = json.loads(res.truth.read_text())["faults"][0]

    def first_named(window_ns: int) -> tuple[int, list[int], list[int], list[int]]:
        # (as the daemon's engines, advanced every 0.25 s: judged at every advance)
        eng = Engine(Topology.load(res.topology), config=EngineConfig.analysed_every(0.25))
        eng.set_window(window_ns)
        judged: list[int] = []
        passes: list[int] = []
        conns_passes: list[int] = []
        slow, conns, advance = eng._slow_ranks, eng.localizer._comm_slow_conns, eng.advance

        def spy_advance(now: int, *a, **k):
            passes.append(now)
            return advance(now, *a, **k)

        def spy(now: int) -> None:
            judged.append(now)
            slow(now)

        def spy_conns(*a, **k):
            conns_passes.append(passes[-1])
            return conns(*a, **k)
        eng.advance = spy_advance  # type: ignore[method-assign]
        eng._slow_ranks = spy  # type: ignore[method-assign]
        eng.localizer._comm_slow_conns = spy_conns  # type: ignore[method-assign]
        reports = replay_live(eng, res.trace, tail_s=5.0)
        # (a report's first emission is the one seen last earliest)
        return (min(r.last_seen_ns for r in reports if named([r], truth)), judged,
                conns_passes, passes)

    at_every, judged_every, conns_every, _ = first_named(0)
    at_long, judged_long, conns_long, passes = first_named(4_000_000_000)
    def gap(times: list[int]) -> int:
        return min(b - a for a, b in itertools.pairwise(times))

    assert gap(judged_long) >= 2_000_000_000 > gap(judged_every)
    assert conns_long and not set(conns_long) & set(judged_long)
    # put off by one pass
    assert all(passes[passes.index(t) - 1] in judged_long for t in conns_long)
    assert set(conns_every) & set(judged_every)
    assert at_long - at_every <= 2_000_000_000
