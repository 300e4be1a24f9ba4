"""Small jobs, whose communicators have only two members (two hosts: each data-parallel group
is a pair; two GPUs per host: each tensor-parallel group is a pair). Two members mirror each
other against their mean, so the noise of a pair is judged from how its samples move over time,
and its base rate of late samples from the quieter member."""

from __future__ import annotations

import pytest

from diagnosis.trace.synth import SynthJob
from tests.support.engine_builders import synth_and_diagnose


def diagnose(tmp_path, **kw):
    reports = synth_and_diagnose(tmp_path / "t.jsonl", SynthJob(iterations=40, **kw))
    return [(r.kind, r.suspects[0].type, r.suspects[0].id) for r in reports]


@pytest.mark.parametrize("hosts,gpus,rank,where", [(2, 1, 1, "node001/gpu0"),
                                                   (2, 2, 3, "node001/gpu1")])
def test_slow_rank_of_a_pair_is_found(tmp_path, hosts, gpus, rank, where):
    assert diagnose(tmp_path, hosts=hosts, gpus_per_host=gpus,
                    slow_ranks={rank: 1.3}) == [("noncomm_slow", "gpu", where)]


def test_slow_host_of_two_is_found(tmp_path):
    assert diagnose(tmp_path, hosts=2, gpus_per_host=2, slow_hosts={0: 1.3}) == [
        ("noncomm_slow", "host", "node000")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_pairs_give_no_report(tmp_path, seed):
    assert diagnose(tmp_path, hosts=2, gpus_per_host=2, seed=seed) == []
