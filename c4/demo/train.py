"""The demo's training job: a small data-parallel MLP on gloo, with c4's collectors on.

A process-level fault can be planted from the environment (the demo does this when it cannot
use cgroups): ``C4_DEMO_SLOW_RANK`` computes ``C4_DEMO_SLOW_MS`` longer per step from step
``C4_DEMO_SLOW_FROM`` on, like a throttled GPU.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

import collectors


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def main() -> None:
    collectors.install()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = _env_int("C4_DEMO_STEPS", 120)
    compute_ms = _env_int("C4_DEMO_COMPUTE_MS", 25)
    slow_rank = _env_int("C4_DEMO_SLOW_RANK", -1)
    slow_ms = _env_int("C4_DEMO_SLOW_MS", 0)
    slow_from = _env_int("C4_DEMO_SLOW_FROM", 0)
    gen = torch.Generator().manual_seed(rank)
    for step in range(steps):
        x = torch.randn(64, 128, generator=gen)
        y = torch.randint(0, 10, (64,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        # the rest of a real step's compute (forward/backward of a bigger model)
        extra = compute_ms + (slow_ms if rank == slow_rank and step >= slow_from else 0)
        time.sleep(extra / 1000)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if step % 10 == 0:
            stats = torch.tensor([loss.item()])
            dist.all_reduce(stats)
            if rank == 0:
                print(f"step {step}: loss {stats.item() / world:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
