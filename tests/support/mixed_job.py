"""A torchrun training script for the pipeline tests: a mix of collectives on two process
groups plus point-to-point calls, synchronous and asynchronous. Each rank writes what it called
to ``$C4_TEST_LOG/rank<R>.json`` so the test can compare with what the daemon stored."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist

import collectors


def main() -> None:
    collectors.install()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 4, "the mixed job expects 4 ranks"
    # Every rank creates every group, in the same order (torch requires it).
    pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    mine = pairs[rank % 2]
    steps = int(os.environ.get("C4_TEST_STEPS", "40"))
    pause = float(os.environ.get("C4_TEST_PAUSE_S", "0.02"))
    calls: Counter[str] = Counter()
    x = torch.ones(1024)
    for _ in range(steps):
        dist.all_reduce(x)
        x.fill_(1.0)
        out = [torch.empty(256) for _ in range(world)]
        dist.all_gather(out, torch.full((256,), float(rank)))
        flat = torch.empty(256 * world)
        dist.all_gather_into_tensor(flat, torch.full((256,), float(rank)))
        rs = torch.empty(64)
        dist.reduce_scatter_tensor(rs, torch.ones(64 * world))
        dist.broadcast(x, src=0)
        calls.update(["all_reduce", "all_gather", "all_gather_into_tensor",
                      "reduce_scatter_tensor", "broadcast"])
        # the pair group, asynchronously
        work = dist.all_reduce(torch.ones(512), group=mine, async_op=True)
        work.wait()
        calls["pair:all_reduce"] += 1
        # point to point: 0 -> 1 and 2 -> 3, synchronous; 1 -> 0 and 3 -> 2, asynchronous
        buf = torch.empty(128)
        if rank % 2 == 0:
            dist.send(torch.full((128,), float(rank)), dst=rank + 1)
            req = dist.irecv(buf, src=rank + 1)
            req.wait()
            calls.update(["send", "irecv"])
        else:
            dist.recv(buf, src=rank - 1)
            req = dist.isend(torch.full((128,), float(rank)), dst=rank - 1)
            req.wait()
            calls.update(["recv", "isend"])
        time.sleep(pause)
    dist.barrier()
    calls["barrier"] += 1
    log = Path(os.environ["C4_TEST_LOG"])
    log.mkdir(parents=True, exist_ok=True)
    (log / f"rank{rank}.json").write_text(json.dumps(dict(calls)))
    dist.destroy_process_group()
    collectors.uninstall()  # flushes what is still buffered


if __name__ == "__main__":
    main()
