"""A batch that holds many calls of one communicator (a small job's trace read in one block,
minutes spilled while the daemon was away): the arena keeps ``W`` calls per communicator, one
per slot, so the batch is fed in pieces whose calls do not share a slot, and none is lost."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosis.engine import Engine
from diagnosis.engine.arena import slot_cuts
from diagnosis.trace.feed import feed_trace
from diagnosis.trace.synth import SynthJob


def test_cuts_fall_where_a_call_would_share_a_slot_with_an_earlier_one():
    seq = np.arange(150)
    assert slot_cuts(np.zeros(150, dtype=np.int64), seq, 64) == [64, 128]
    # two communicators, rows interleaved: each piece holds 64 calls of each at most
    key = np.tile([0, 1], 100)
    both = np.repeat(np.arange(100), 2)
    assert slot_cuts(key, both, 64) == [128]
    # the rows of one call spread over the batch (several ranks) stay in one piece
    ranks = np.tile(np.arange(40), 4)
    assert slot_cuts(np.zeros(160, dtype=np.int64), ranks, 64) == []


def test_a_small_jobs_trace_read_in_one_block_keeps_every_call(tmp_path):
    path = tmp_path / "t.jsonl"
    SynthJob(hosts=2, gpus_per_host=2, iterations=40).write(path)
    engine = Engine()
    _, stats = feed_trace(engine, path)
    assert path.stat().st_size < 4 << 20          # (one read block)
    assert stats.ops > 64 * 4 * 2                 # (over 64 calls of each communicator)
    assert engine.arena.stale_rows == 0



def _cuts_one_row_at_a_time(key: np.ndarray, seq: np.ndarray, window: int) -> list[int]:
    """The rule as written: a piece ends before the first row whose slot already holds
    another call in it."""
    cuts: list[int] = []
    held: dict[tuple[int, int], int] = {}
    for i, (k, s) in enumerate(zip(key.tolist(), seq.tolist())):
        slot = (k, s % window)
        if held.get(slot, s) != s:
            cuts.append(i)
            held = {}
        held[slot] = s
    return cuts


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 4, 64]), st.booleans())
def test_cuts_follow_the_rule_on_any_batch(seed, window, in_order):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    key = rng.integers(0, int(rng.integers(1, 6)), n)
    seq = rng.integers(0, int(rng.integers(1, 400)), n)
    if in_order:                     # calls arrive in order, a call's rows together or not
        seq = np.sort(seq)
    assert slot_cuts(key, seq, window) == _cuts_one_row_at_a_time(key, seq, window)
