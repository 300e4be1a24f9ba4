"""One rank of a torch.distributed (gloo) probe, started by :mod:`diagnosis.probes.gloo` as a
script (``python gloo_worker.py ...``) so that it needs nothing of c4 and only the probe's own
processes import torch.

Ops: ``sendrecv`` (every rank sends to the next and receives from the previous at once, as
nccl-tests' sendrecv_perf does) and ``all_reduce``. Rank 0 prints one JSON line with the
slowest rank's median time per iteration and every rank's own."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import timedelta


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gloo_worker")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="ADDR:PORT of rank 0's store")
    p.add_argument("--op", choices=("sendrecv", "all_reduce"), required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    ns = p.parse_args(argv)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{ns.master}", rank=ns.rank,
                            world_size=ns.world, timeout=timedelta(seconds=ns.timeout))
    n = max(1, ns.bytes // 4)
    buf = torch.ones(n, dtype=torch.float32)
    inbox = torch.empty_like(buf)

    def once() -> None:
        if ns.op == "all_reduce":
            dist.all_reduce(buf)
            return
        nxt, prv = (ns.rank + 1) % ns.world, (ns.rank - 1) % ns.world
        works = [dist.isend(buf, nxt), dist.irecv(inbox, prv)]
        for w in works:
            if w is not None:    # None only for a rank outside the group
                w.wait()

    for _ in range(ns.warmup):
        once()
    dist.barrier()
    laps = []
    for _ in range(ns.iters):
        t0 = time.perf_counter()
        once()
        laps.append(time.perf_counter() - t0)
    # the median lap: a loaded machine's scheduling hiccups hit single laps, not the median
    mine = statistics.median(laps)
    times = [torch.zeros(1, dtype=torch.float64) for _ in range(ns.world)]
    dist.all_gather(times, torch.tensor([mine], dtype=torch.float64))
    if ns.rank == 0:
        per_rank = [float(t.item()) for t in times]
        print(json.dumps({"op": ns.op, "world": ns.world, "bytes": n * 4, "iters": ns.iters,
                          "seconds_per_iter": max(per_rank), "rank_seconds": per_rank}),
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
