"""``c4 sim --as ncclras`` counts what real RAS counts: the calls each rank's CPU launched,
which run ahead of what its GPU reached (recorded on an H100, NCCL 2.28.9: ranks waiting in
their 100th AllReduce showed 200), up to the iteration's end; a hung process launches nothing
more. Checked against the same run's c4 trace, whose op rows are the calls the GPUs reached."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from diagnosis.nccl.ras import read_ras_file
from diagnosis.sim import SimConfig, simulate
from diagnosis.sim.config import FaultSpec, SimError
from diagnosis.sim.formats import sinks_for
from diagnosis.sim.nccl_ids import comm_hash, pid_of

HUNG = 8      # seed 11: rank 8 hangs in iteration 6's optimizer step; iteration 7 is stuck
CALLS = {"tp": 4, "dp": 1}      # collectives per rank per iteration (2 microbatches)


def _counts(tmp: Path, run_ahead: int | None) -> tuple[dict, Counter]:
    """RAS's launch counts in the last report and the trace's calls entered, per (rank, pg)."""
    cfg = SimConfig(gpus=64, pp=2, iterations=9, microbatches=2, job="t", seed=11,
                    faults=(FaultSpec.parse("rank_hang:auto@6"),), checkpoint_every=0)
    simulate(cfg, tmp, sinks=sinks_for(["ncclras"], ras_run_ahead=run_ahead))
    lines = [json.loads(x) for x in (tmp / "trace.jsonl").read_text().splitlines()]
    pgs = {comm_hash("t", 11, x["pg"]): x["pg"] for x in lines if x["type"] == "group"}
    entered = Counter((x["rank"], x["pg"]) for x in lines
                      if x["type"] == "op" and "peer" not in x)
    rank_of = {pid_of(r): r for r in range(64)}
    launched = {(rank_of[m.pid], pgs[c.hash]): sum(m.counts.values())
                for c in read_ras_file(tmp / "ncclras.json")[-1].comms for m in c.ranks}
    return launched, entered


def test_ras_counts_the_stuck_iteration_every_live_cpu_launched(tmp_path):
    launched, entered = _counts(tmp_path, None)
    assert all(launched[k] >= entered[k] for k in launched)
    for (r, pg), n in launched.items():
        if r == HUNG:       # its process stopped: what it launched, its GPU reached
            assert n == entered[(r, pg)], pg
        elif not pg.startswith("pp"):      # (sends and receives are not counted)
            assert n == 8 * CALLS[pg.split(".")[0]], (r, pg)     # iterations 0-7, whole
    # rank 0 waits in its send to rank 8, short of the TP calls and the DP all-reduce after it
    assert entered[(0, "tp.0")] == 29 and entered[(0, "dp.0")] == 7


def test_ras_run_ahead_caps_the_launches_past_the_waiting_call(tmp_path):
    launched, entered = _counts(tmp_path / "none", 0)
    assert launched == {k: entered[k] for k in launched}
    launched, entered = _counts(tmp_path / "two", 2)
    # rank 0's two calls after its send: the next TP all-reduce and its send (not counted)
    assert launched[(0, "tp.0")] == 30 and launched[(0, "dp.0")] == 7


def test_a_negative_run_ahead_is_refused():
    with pytest.raises(SimError, match="--ras-run-ahead -1"):
        sinks_for(["ncclras"], ras_run_ahead=-1)
