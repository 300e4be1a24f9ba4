"""The plan bench's job (one rank per lab host): rank i sends a tensor to rank i + world/2 (all
such pairs at once, like a pipeline stage handing activations to the next), in several fresh
process groups (trials: each has new connections, hence new source ports and a new ECMP
draw). Rank 0 writes
``{"gbps_per_flow": [...]}``, per trial the rate of the slowest flow (the transfer is as slow
as it), to the path given as the first argument.

Environment: ``C4_BENCH_TRIALS`` (4), ``C4_BENCH_MB`` (16), ``C4_BENCH_ITERS`` (3)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    half = world // 2
    partner = rank + half if rank < half else rank - half if rank < 2 * half else None
    trials = int(os.environ.get("C4_BENCH_TRIALS", 4))
    nbytes = int(os.environ.get("C4_BENCH_MB", 16)) << 20
    iters = int(os.environ.get("C4_BENCH_ITERS", 3))
    send = torch.ones(nbytes // 4)
    recv = torch.empty_like(send)
    per_trial = []
    for _ in range(trials):
        group = dist.new_group(list(range(world)))
        rates = []
        for _ in range(iters):
            dist.barrier(group=group)
            if partner is None:
                continue
            t0 = time.perf_counter()
            if rank < half:
                dist.send(send, partner, group=group)
            else:
                dist.recv(recv, partner, group=group)
            rates.append(nbytes * 8 / (time.perf_counter() - t0) / 1e9)
        mine = torch.tensor([statistics.median(rates) if rates else float("inf")])
        dist.all_reduce(mine, op=dist.ReduceOp.MIN)
        per_trial.append(round(mine.item(), 4))
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"gbps_per_flow": per_trial, "bytes": nbytes, "iters": iters}, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
