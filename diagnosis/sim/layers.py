"""A stage's work on one microbatch as transformer layers with sequence-parallel tensor
parallelism (Megatron-LM's sequence parallelism), for realistic call rates.

With ``layers = N`` > 1, each stage's forward (or backward) of a microbatch is N layers of two
blocks each (attention, then MLP). A block all-gathers the sequence-parallel activations across
the tensor-parallel group, computes its share of the pass, and reduce-scatters the result: so
2N all-gathers and 2N reduce-scatters per pass. One activation is ``tp_bytes / 2N``, so a pass
moves on the wire what its one all-reduce did with ``layers = 1`` (an all-reduce is a
reduce-scatter plus an all-gather): the job's bandwidth and iteration time stay, its calls
multiply by 4N. ``layers = 1`` is the classic model: one compute, then one all-reduce (the
simulator's output before layers existed, byte for byte).

The ``bytes`` of a row are that rank's input, as the collectors record them: the all-gather's
shard (``1/T`` of the activation), the reduce-scatter's whole activation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from diagnosis.sim.model import Simulation, _Acc

ALL_GATHER, REDUCE_SCATTER = "all_gather", "reduce_scatter"
BLOCKS = 2          # per layer: attention, MLP


def run_layers(sim: Simulation, ops: _Acc, s: int, k: int, ready: np.ndarray, ms: float,
               call: int) -> np.ndarray:
    """Stage ``s``'s ``call``-th pass (compute step ``k`` of the iteration) through all
    layers, from ``ready``; returns when each rank of the stage is done. Block ``b``'s
    all-gather is collective ``call * 2 * blocks + 2b`` of the group, its reduce-scatter
    the next one."""
    blocks = BLOCKS * sim.cfg.layers
    T = sim.shape[2]
    size = sim.cfg.tp_bytes / blocks
    ag, rs = sim.op_code(ALL_GATHER), sim.op_code(REDUCE_SCATTER)
    seq = call * 2 * blocks
    t = ready
    for b in range(blocks):
        t = sim._tp(ops, s, t, seq + 2 * b, op=ag, nbytes=int(size // T), size=size, share=1)
        # one-off pauses and hangs strike the pass's first piece of compute
        t = sim._compute(s, k, t, ms / blocks, first=b == 0)
        t = sim._tp(ops, s, t, seq + 2 * b + 1, op=rs, nbytes=int(size), size=size, share=1)
    return t
