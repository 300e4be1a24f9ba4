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

from dataclasses import dataclass

ALL_GATHER, REDUCE_SCATTER = "all_gather", "reduce_scatter"
BLOCKS = 2          # per layer: attention, MLP


@dataclass(frozen=True)
class Collective:
    """A tensor-parallel collective of the pass: ``nbytes`` is what each rank's row records,
    ``size`` the buffer the ring moves a share of."""
    op: str
    seq: int
    nbytes: int
    size: float


@dataclass(frozen=True)
class Compute:
    """A piece of the pass's compute: one of ``pieces`` equal ones; one-off pauses and hangs
    strike only the ``first``."""
    pieces: int
    first: bool


def pass_steps(layers: int, tp_bytes: float, tp: int, call: int) -> list[Collective | Compute]:
    """The ``call``-th pass of a stage through ``layers`` layers on a tensor-parallel group of
    ``tp`` ranks, in order (the timing model runs them). Block ``b``'s all-gather is
    collective ``call * 2 * blocks + 2b`` of the group, its reduce-scatter the next one."""
    blocks = BLOCKS * layers
    size = tp_bytes / blocks
    seq = call * 2 * blocks
    steps: list[Collective | Compute] = []
    for b in range(blocks):
        steps += [Collective(ALL_GATHER, seq + 2 * b, int(size // tp), size),
                  Compute(blocks, first=b == 0),
                  Collective(REDUCE_SCATTER, seq + 2 * b + 1, int(size), size)]
    return steps
