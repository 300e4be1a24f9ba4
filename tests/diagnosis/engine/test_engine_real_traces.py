"""Regressions on traces recorded from real gloo jobs through c4's live pipeline (see
fixtures/README.md for how each was recorded)."""

from __future__ import annotations

from pathlib import Path

from diagnosis.engine import Engine
from diagnosis.trace.feed import feed_trace

FIXTURES = Path(__file__).parent / "fixtures"


def test_compute_before_one_of_several_calls_per_step_is_noncomm_slow():
    # each step: compute, then 4 all_reduce calls of different sizes on one communicator; from
    # step 40 rank 3 computes 60 ms longer. Only the first call of a step follows the compute,
    # so samples must span an iteration (same-signature calls), not a consecutive call pair.
    reports, _ = feed_trace(Engine(), FIXTURES / "demo_slow_rank3.jsonl.gz")
    assert [r.kind for r in reports] == ["noncomm_slow"]
    assert reports[0].suspects[0].rank == 3
