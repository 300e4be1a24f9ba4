"""Each detector on small synthetic jobs with planted faults (known truth), and healthy noisy jobs
that must give no report at all."""

from __future__ import annotations

import pytest

from diagnosis.trace.synth import SynthJob
from tests.support.engine_builders import synth_and_diagnose, top


def run(tmp_path, topology=True, **kw):
    job = SynthJob(**kw)
    return job, synth_and_diagnose(tmp_path / "trace.jsonl", job, topology=topology,
                                   block_bytes=64 << 10)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_noisy_job_gives_no_report(tmp_path, seed):
    # warm-up 2.5x, a 400 ms checkpoint step on every rank, one-off pauses up to 200 ms,
    # 3% jitter: all noise, no fault
    _, reports = run(tmp_path, seed=seed, pause_rate=0.01)
    assert reports == []


def test_slow_gpu_is_named_and_its_victims_are_not(tmp_path):
    # rank 5's tensor-parallel peers wait for it and then arrive late everywhere: victims
    job, reports = run(tmp_path, slow_ranks={5: 1.2})
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert top(reports[0]) == ("gpu", "node001/gpu1")
    assert reports[0].suspects[0].rank == 5
    assert reports[0].first_seen_ns >= job.t0_ns
    assert "rank 5" in reports[0].summary


def test_slow_host_names_the_host(tmp_path):
    _, reports = run(tmp_path, slow_hosts={6: 1.3})
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert top(reports[0]) == ("host", "node006")


def test_rank_hang_blames_the_rank_that_is_not_waiting(tmp_path):
    # rank 9 stops; its host's peers wait in tp.2, every other rank then waits for them
    _, reports = run(tmp_path, hang_rank=9)
    assert [r.kind for r in reports] == ["noncomm_hang"]
    r = reports[0]
    assert top(r) == ("gpu", "node002/gpu1")
    assert r.pg == "tp.2"
    assert r.evidence["culprits"] == [9]
    assert "dp.1" in r.evidence["last_completed"]["9"]
    assert r.evidence["blocked_ranks"] >= 3


def test_comm_hang_of_one_transfer_names_its_sender(tmp_path):
    _, reports = run(tmp_path, comm_hang_group=2, comm_hang_src=10)
    assert [r.kind for r in reports] == ["comm_hang"]
    assert top(reports[0]) == ("gpu", "node002/gpu2")


def test_error_names_the_failed_rank(tmp_path):
    _, reports = run(tmp_path, error_rank=13)
    assert [r.kind for r in reports] == ["error"]
    assert top(reports[0]) == ("gpu", "node003/gpu1")
    assert reports[0].evidence["status"] == ["error"]


def test_slow_nic_named_with_its_cable(tmp_path):
    _, reports = run(tmp_path, hosts=16, slow_components={"node005/nic1": 2.0})
    assert [r.kind for r in reports] == ["comm_slow"]
    ids = [(s.type, s.id) for s in reports[0].suspects]
    assert ids[:2] == [("nic", "node005/nic1"), ("link", "leaf01r1~node005/nic1")]


def test_slow_uplink_is_told_from_nics(tmp_path):
    # several rings cross the uplink; healthy traffic through the leaf, spine and NICs clears
    # them, leaving the link
    _, reports = run(tmp_path, hosts=16, gpus_per_host=2, hosts_per_leaf=4, spines=2,
                     slow_components={"leaf01r0~spine00": 1.6})
    assert [r.kind for r in reports] == ["comm_slow"]
    assert ("link", "leaf01r0~spine00") in [(s.type, s.id) for s in reports[0].suspects[:2]]
    assert reports[0].suspects[0].type == "link"


def test_without_topology_suspects_are_ranks(tmp_path):
    _, reports = run(tmp_path, topology=False, hang_rank=9)
    assert [r.kind for r in reports] == ["noncomm_hang"]
    # rank records carry gpu ids, so the rank is still named by its GPU
    assert reports[0].suspects[0].rank == 9


def test_comm_slow_without_connection_records_uses_communicators(tmp_path):
    # op records only: the slow ring is found from its own transfer-time baseline, and the
    # components it shares with no healthy ring explain it
    _, reports = run(tmp_path, conns=False, slow_components={"node005/nic1": 2.0})
    assert [r.kind for r in reports] == ["comm_slow"]
    assert reports[0].evidence["via"] == "communicators"
    # a ring alone cannot tell its members' NICs apart: they lie on different paths, so the
    # report names none of them (as a hang so tied does) and lists them as the evidence
    assert reports[0].suspects == ()
    tied = reports[0].evidence["explained_equally_by"]
    assert "nic node005/nic1" in tied and "one of" in reports[0].summary
    # but it never blames another rail
    assert not any(i.endswith(("nic0", "nic2", "nic3")) for i in tied)


def test_transfers_slow_only_where_they_touch_a_slow_gpu_are_its_symptom(tmp_path):
    # rank 21 (node005/gpu1) computes 30% slower and every transfer of its own (its NIC's) is
    # slow too, as a throttled GPU's kernels (or, with gloo, a starved CPU) move its data
    # slower: one fault, reported once, on the GPU
    _, reports = run(tmp_path, hosts=16, slow_ranks={21: 1.3},
                     slow_components={"node005/nic1": 2.0})
    assert [r.kind for r in reports if r.state == "open"] == ["noncomm_slow"]
    assert top(next(r for r in reports if r.state == "open")) == ("gpu", "node005/gpu1")
    for r in reports:
        if r.kind == "comm_slow":
            assert "explained by slow rank(s) [21]" in r.evidence.get("resolved", "")


def test_a_slow_spine_seen_through_communicators_alone_is_not_pinned_on_one_spine(tmp_path):
    # op records only (as NCCL's Inspector writes them): the rings that cross the slow spine
    # are slow, and every spine of their leaves' ECMP routes explains that equally. Naming the
    # first of them would send an engineer to a healthy switch as often as not: the report
    # says where the slowdown lies and names none
    _, reports = run(tmp_path, conns=False, hosts=16, gpus_per_host=2, hosts_per_leaf=4,
                     spines=2, slow_components={"spine00": 2.0})
    slow = [r for r in reports if r.kind == "comm_slow"]
    assert slow, [r.summary for r in reports]
    assert all(r.suspects == () for r in slow), [(r.summary, r.suspects) for r in slow]
    assert any("switch spine00" in r.evidence["explained_equally_by"] for r in slow)
