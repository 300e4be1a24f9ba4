"""``--layers N``: per-layer sequence-parallel collectives, realistic call rates, same job."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
from simtrace_helpers import run

from diagnosis.sim import FaultSpec

BASE = {"gpus": 64, "iterations": 6, "microbatches": 2, "seed": 3, "gc_rate": 0.0,
        "checkpoint_every": 0, "congestion_rate": 0.0, "iteration_jitter": 0.0, "warmup": ()}
TP_BYTES = 32 << 20


@pytest.fixture(scope="module")
def one_and_four(tmp_path_factory):
    return (run(tmp_path_factory.mktemp("l1"), **BASE),
            run(tmp_path_factory.mktemp("l4"), layers=4, **BASE))


def test_each_pass_is_an_all_gather_and_reduce_scatter_per_block(one_and_four):
    _, tr = one_and_four
    M, L, T = BASE["microbatches"], 4, 8
    calls: dict[str, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for o in tr.ops:
        if o["pg"].startswith("tp."):
            calls[o["pg"]][o["seq"]].add((o["op"], o["bytes"], o["rank"]))
    per_iter = 2 * M * 2 * 2 * L           # passes x blocks (2 per layer) x 2 calls
    for pg, by_seq in calls.items():
        assert sorted(by_seq) == list(range(BASE["iterations"] * per_iter)), pg
        for seq, rows in by_seq.items():
            op = "all_gather" if seq % 2 == 0 else "reduce_scatter"
            size = TP_BYTES // (2 * L)
            # every member, the rank's input: a shard for the gather, all for the scatter
            assert rows == {(op, size // T if op == "all_gather" else size, r)
                            for r in tr.groups[pg]}


def test_same_job_pace_many_more_calls(one_and_four):
    one, four = one_and_four

    def pace(tr):
        s = tr.truth["iteration_start_ns"]
        return (s[-1] - s[2]) / (len(s) - 3)

    assert 0.95 < pace(four) / pace(one) < 1.08
    # the other groups' calls are the same ones
    for tr in one_and_four:
        assert not any(o["op"] in ("all_gather", "reduce_scatter") for o in tr.ops
                       if not o["pg"].startswith("tp."))
    assert sum(o["pg"].startswith("dp.") for o in four.ops) == \
        sum(o["pg"].startswith("dp.") for o in one.ops)
    r1, r4 = one.truth["calls_per_s_per_rank"], four.truth["calls_per_s_per_rank"]
    assert 5 < r1 < 30 and 4 < r4 / r1 < 13
    assert four.truth["layout"]["layers"] == 4


def _block_compute(tr, rank: int, onset: int) -> tuple[float, float]:
    """Mean time the rank spends between the end of a tensor-parallel all-gather and entering
    the reduce-scatter that follows (one block's compute), in the iterations before ``onset``
    and from it (by the calls' seq: stages overlap in time across iteration starts)."""
    per_iter = 2 * BASE["microbatches"] * 2 * 2 * 4
    mine = sorted((o for o in tr.ops if o["rank"] == rank and o["pg"].startswith("tp.")),
                  key=lambda o: o["t_enter_ns"])
    gaps: dict[bool, list[int]] = {True: [], False: []}
    for a, b in itertools.pairwise(mine):
        if a["op"] == "all_gather" and b["op"] == "reduce_scatter" and a.get("t_end_ns"):
            gaps[b["seq"] // per_iter >= onset].append(b["t_enter_ns"] - a["t_end_ns"])
    return float(np.mean(gaps[False])), float(np.mean(gaps[True]))


def test_slow_gpu_slows_its_compute_in_every_layer(tmp_path):
    tr = run(tmp_path, layers=4,
             **{**BASE, "faults": (FaultSpec.parse("slow_gpu:9@3,slow=1.5"),)})
    before, after = _block_compute(tr, 9, 3)
    assert 1.4 < after / before < 1.6
    before, after = _block_compute(tr, 10, 3)
    assert 0.97 < after / before < 1.03


def test_rank_hang_stops_the_rank_inside_a_pass(tmp_path):
    tr = run(tmp_path, layers=4, **{**BASE, "faults": (FaultSpec.parse("rank_hang:21@3"),)})
    onset = tr.truth["iteration_start_ns"][3]
    stuck = [o for o in tr.ops if o.get("t_end_ns") is None]
    assert stuck and all(o["t_enter_ns"] >= onset for o in stuck)
    assert all(o.get("t_end_ns") for o in tr.ops if o["rank"] == 21)
    assert tr.truth["stalled"] and tr.truth["faults"][0]["event_ns"] >= onset
