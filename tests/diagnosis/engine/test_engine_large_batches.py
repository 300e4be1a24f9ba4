"""A batch that holds many calls of one communicator (a small job's trace read in one block,
minutes spilled while the daemon was away): the arena keeps ``W`` calls per communicator, one
per slot, so the batch is fed in pieces whose calls do not share a slot, and none is lost."""

from __future__ import annotations

import numpy as np

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

