"""RAS counts the calls a rank's CPU launched, not the ones its GPU reached (recorded on an
H100: ranks waiting in their 100th AllReduce showed 200), so a rank stuck in one call looks
inside every call it launched after it, on every communicator, and a hung process looks idle.
The reader places each silent rank in the one call its stream is in: a job simulated with
CPUs that run ahead to the end of the iteration (as ``c4 sim --as ncclras`` writes RAS now),
read back from the Inspector's files and the RAS reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.accuracy.nccl import analyze_nccl_run
from bench.accuracy.score import score_scenario
from tests.diagnosis.nccl.support import simulated

# seed 11: rank 8 (pipeline stage 1) hangs in the optimizer step, before the receive that
# opens its next iteration; its sender, rank 0, waits in the send
HANG = "rank_hang:auto@6"


def _analyzed(out: Path) -> tuple[dict, list[dict]]:
    truth = json.loads((out / "truth.json").read_text())
    return truth, analyze_nccl_run(out, out / "topology.json", with_ras=True)


@pytest.mark.parametrize(("run_ahead", "layers"), [(None, 1), (2, 1), (None, 16)])
def test_a_hung_process_before_a_receive_is_the_one_hang(tmp_path, run_ahead, layers):
    # (16 layers: runs of alternating all-gathers and reduce-scatters on one communicator,
    # where only the step's whole period tells which call comes next)
    truth, reports = _analyzed(simulated(str(tmp_path), HANG, seed=11,
                                         ras_run_ahead=run_ahead, layers=layers))
    assert truth["faults"][0]["ranks"] == [8]
    # its peers' CPUs launched the whole iteration: not a stuck transfer in the queued
    # calls, nor in the send to the hung rank (which never launched its receive)
    assert [(r["kind"], r["suspects"][0]["id"]) for r in reports] == \
        [("noncomm_hang", "node001/gpu0")], [r["summary"] for r in reports]
    assert "never entered" in reports[0]["summary"]


@pytest.mark.parametrize(("seed", "every_s"), [(1, 10.0), (4, 1.0)])
def test_a_dead_nic_under_a_send_stays_a_stuck_transfer(tmp_path, seed, every_s):
    # both ends of the stuck send/recv launched past it: both are inside it. With a report
    # every second, the sender's queued collective is not taken for one it never entered
    # (its peers would meet their hang bound there) while it is silent for less than 5 s
    truth, reports = _analyzed(simulated(str(tmp_path), "dead_nic:auto@6", seed=seed,
                                         ras_every_s=every_s))
    score = score_scenario(truth, reports)
    assert [r["kind"] for r in reports] == ["comm_hang"], [r["summary"] for r in reports]
    assert score.faults[0].detected and score.false_reports == 0
    assert "send/recv" in reports[0]["summary"]


@pytest.mark.parametrize("seed", [3, 6])
def test_a_process_that_died_is_an_error_in_the_call_after_its_peers_last_one(tmp_path, seed):
    # A process that exits loses the Inspector records it had not dumped: its last record is
    # a call or more behind its peers'. RAS loses it; its failed row belongs in the call after
    # the last one a peer completed (which it took part in), where its peers wait. Placed after
    # its own last record, the row fell on a call every peer had finished: nobody waited on
    # the failure, and the job's silence read as a teardown (no report).
    truth, reports = _analyzed(simulated(str(tmp_path), "error:auto@6", seed=seed))
    rank = truth["faults"][0]["ranks"][0]
    assert [r["kind"] for r in reports] == ["error"], [r["summary"] for r in reports]
    assert [s.get("rank") for s in reports[0]["suspects"]] == [rank]
    score = score_scenario(truth, reports)
    assert score.faults[0].top1 and score.false_reports == 0
