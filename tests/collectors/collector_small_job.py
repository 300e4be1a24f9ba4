"""One rank of a small gloo job (not a test module): ``argv[1]`` all_reduces, an isend/irecv
exchange, a barrier and two DDP steps, then this process's collector counters as JSON.

With ``argv[2] == "install"`` it calls ``collectors.install()``; otherwise it relies on `c4 run`
and must not mention the collector before torch.distributed is imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

if sys.argv[2] == "install":
    import collectors

    collectors.install()

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.ones(16)
for _ in range(int(sys.argv[1])):
    dist.all_reduce(t)
peer = (rank + 1) % world
src = (rank - 1) % world
works = [dist.isend(torch.ones(4), peer), dist.irecv(torch.zeros(4), src)]
for w in works:
    w.wait()
dist.barrier()
# DDP, two steps: its bucket all-reduce (one bucket for this model) is recorded once per step.
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
for _ in range(2):
    model(torch.randn(3, 8)).sum().backward()

import collectors  # noqa: E402  (only now: the auto-installed collector is already there)

installed = collectors.current() is not None
collectors.flush(timeout=2.0)
counters = collectors.stats()
print(json.dumps({"rank": rank, "installed": installed,
                  "counters": dataclasses.asdict(counters) if counters else None}), flush=True)
dist.destroy_process_group()
