"""Slow ranks that share a host with others of their communicator: half of a small group slow at
once (a host whose GPUs are half of a data-parallel group), and a GPU slow beside host-mates
that it slows a little (full telemetry, own time outside calls)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _job(path: Path, hosts: int, gpus: int, extra: dict[int, float], iterations: int = 60,
         onset: int = 30, seed: int = 0) -> list:
    """Ranks of ``hosts`` x ``gpus`` in one communicator, each iteration 20 ms of compute then an
    all-reduce of 5 ms after the last one enters; from ``onset`` on, rank r computes
    ``extra[r]`` times longer."""
    rng = np.random.default_rng(seed)
    world = hosts * gpus
    with TraceWriter(path) as w:
        w.meta("host-mates")
        for r in range(world):
            h = r // gpus
            w.rank(r, f"node{h:03d}", f"node{h:03d}/gpu{r % gpus}", f"node{h:03d}/nic0")
        w.group("dp", list(range(world)))
        t = T0
        for it in range(iterations):
            compute = 20 * MS * rng.lognormal(0.0, 0.03, world)
            if it >= onset:
                for r, f in extra.items():
                    compute[r] *= f
            enter = (t + compute).astype(np.int64)
            end = int(enter.max()) + 5 * MS
            for r in range(world):
                w.op(r, "dp", it, "all_reduce", 1 << 20, int(enter[r]), end)
            t = end
        w.end(t + 10 * MS)
    reports, _ = feed_trace(Engine(), path)
    return [(r.kind, r.suspects[0].type, r.suspects[0].id) for r in reports]


def test_a_host_that_is_half_of_its_group_is_named(tmp_path):
    # two hosts of two GPUs in one group of four: node001's two compute 1.5x from iteration 30,
    # so the group's median falls between the hosts and every member seems off it by as much;
    # the noise is how much a member's samples move from one to the next
    assert _job(tmp_path / "t.jsonl", 2, 2, {2: 1.5, 3: 1.5}) == \
        [("noncomm_slow", "host", "node001")]


def test_a_gpu_slowing_its_host_mate_a_little_is_the_gpu(tmp_path):
    # rank 5 computes twice as long; rank 4, on the same host, 10% longer (the slow GPU takes
    # its share of the host's CPU): the GPU, not the host
    assert _job(tmp_path / "t.jsonl", 4, 2, {5: 2.0, 4: 1.1}) == \
        [("noncomm_slow", "gpu", "node002/gpu1")]
