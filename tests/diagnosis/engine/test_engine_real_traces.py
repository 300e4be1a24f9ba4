"""Regressions on traces recorded from real gloo jobs through c4's live pipeline (see
fixtures/README.md for how each was recorded)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from c4.topology import Topology
from diagnosis.engine import Engine
from diagnosis.trace.feed import feed_trace
from tests.support.replay import replay_live

FIXTURES = Path(__file__).parent / "fixtures"


def test_compute_before_one_of_several_calls_per_step_is_noncomm_slow():
    # each step: compute, then 4 all_reduce calls of different sizes on one communicator; from
    # step 40 rank 3 computes 60 ms longer. Only the first call of a step follows the compute,
    # so samples must span an iteration (same-signature calls), not a consecutive call pair.
    reports, _ = feed_trace(Engine(), FIXTURES / "demo_slow_rank3.jsonl.gz")
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert reports[0].suspects[0].rank == 3


def _until(src: Path, dst: Path, t_ns: int) -> Path:
    """The records of ``src`` that happened before ``t_ns`` (what had arrived by then)."""
    with gzip.open(src, "rt") as fh, open(dst, "w") as out:
        for line in fh:
            rec = json.loads(line)
            t = max(rec.get(k, 0) for k in ("t_enter_ns", "t_end_ns", "t_start_ns"))
            if t < t_ns:
                out.write(line)
    return dst


def test_frozen_rank_in_2d_groups_is_named_not_the_ranks_waiting_for_it(tmp_path):
    # 8 ranks on 4 hosts, row and column groups plus world and checkpoint groups; the rank on
    # node001/gpu1 (rank 3) is frozen by the cgroup freezer: it goes silent, and the ranks of
    # node000 wait for it through their row group (it looked like a cycle around node000)
    path = FIXTURES / "lab2d_frozen_teardown.jsonl.gz"
    topology = Topology.load(FIXTURES / "lab2d_topology.json")
    freeze = 1795318560579251000            # when the freezer was applied (lab state)
    before_teardown = _until(path, tmp_path / "frozen.jsonl", freeze + 2_000_000_000)
    changes = replay_live(Engine(topology), before_teardown, tail_s=15.0)
    hangs = [r for r in changes if r.kind in ("noncomm_hang", "comm_hang", "error")]
    assert hangs, "the hang was not reported"
    assert all(r.kind == "noncomm_hang" for r in hangs)
    for r in hangs:
        assert (r.suspects[0].id, r.suspects[0].rank) == ("node001/gpu1", 3)
        assert "node000" not in {s.id.split("/")[0] for s in r.suspects}


def test_teardown_after_a_hang_files_no_error():
    # a job hung on a frozen rank (see fixtures/README.md), then stopped by its supervisor:
    # the last calls end with errors on several ranks, which stop within ~25 ms of each other
    path = FIXTURES / "lab2d_frozen_teardown.jsonl.gz"
    topology = Topology.load(FIXTURES / "lab2d_topology.json")
    engine = Engine(topology)
    changes = replay_live(engine, path, tail_s=30.0)
    assert not [r for r in changes if r.kind == "error"]
    assert engine.teardown.dropped, "the teardown's errors were never considered"
    reports, _ = feed_trace(Engine(topology), path)
    assert not [r for r in reports if r.kind == "error"]


def test_local_teardown_files_no_error():
    # 4 local ranks killed at the end of a demo: they stop at slightly different times, so
    # some calls were completed by part of the ranks only ("stopped reporting")
    engine = Engine()
    changes = replay_live(engine, FIXTURES / "local_teardown.jsonl.gz", tail_s=20.0)
    assert not [r for r in changes if r.kind == "error"]
    assert engine.teardown.dropped



def test_cpu_contention_on_a_host_holding_half_of_a_group_names_the_host():
    # 4 hosts x 2 ranks, pipeline of 2 stages with a data-parallel group of 4 per stage: the
    # two ranks of node001 are half of stage 0's group. From the onset, CPU burners in node001's
    # cgroup make its ranks compute ~3x longer. The group's median falls between the hosts and
    # its pooled spread is the fault itself; the host must still be named first. (The burners
    # also slow the lab's other hosts, which share the machine's cores: later reports may
    # name what they slowed.)
    path = FIXTURES / "lab_cpu_contention.jsonl.gz"
    topology = Topology.load(FIXTURES / "lab2d_topology.json")
    onset = 1795746170720000000            # when the burners started (lab state)
    changes = replay_live(Engine(topology), path, tail_s=5.0)
    assert changes, "nothing was reported"
    first = changes[0]
    assert (first.kind, first.suspects[0].id) == ("noncomm_slow", "node001")
    assert first.last_seen_ns - onset < 5_000_000_000, "named more than 5 s after the onset"
    reports, _ = feed_trace(Engine(topology), path)
    assert ("noncomm_slow", "node001") in [(r.kind, r.suspects[0].id) for r in reports]
