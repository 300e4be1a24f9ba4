"""A torchrun script for the reduced-telemetry tests: each rank makes small all_reduces on the
world group and on a pair group at a steady pace (``C4_TEST_RATE`` calls per second per group)
until ``C4_TEST_SECONDS`` have passed, after writing its pid to ``$C4_TEST_LOG/rank<R>.pid`` so
that the test can stop one. gloo on the CPU; with ``C4_TEST_BACKEND=nccl``, NCCL on the GPUs
(several ranks to a GPU through ``NCCL_HOSTID``, as ``nccl_job.py`` does). Relies on `c4 run`
for the collector (no import of it here)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def _device() -> torch.device:
    if os.environ.get("C4_TEST_BACKEND", "gloo") != "nccl":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    ndev = torch.cuda.device_count()
    if ndev < int(os.environ.get("LOCAL_WORLD_SIZE", "1")):
        # NCCL refuses two ranks of one host on one GPU; read when it makes the first comm
        os.environ["NCCL_HOSTID"] = f"c4-steady-{local}"
    device = torch.device("cuda", local % ndev)
    torch.cuda.set_device(device)
    return device


def main() -> None:
    device = _device()
    dist.init_process_group("gloo" if device.type == "cpu" else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    # every rank creates every group, in the same order (torch requires it)
    pair = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)][rank // 2]
    log = Path(os.environ["C4_TEST_LOG"])
    log.mkdir(parents=True, exist_ok=True)
    (log / f"rank{rank}.pid").write_text(str(os.getpid()))
    rate = float(os.environ.get("C4_TEST_RATE", "100"))
    until = time.monotonic() + float(os.environ.get("C4_TEST_SECONDS", "60"))
    x = torch.ones(16, device=device)
    t0 = time.monotonic()
    n = 0
    while time.monotonic() < until:
        dist.all_reduce(x)
        dist.all_reduce(x, group=pair)
        n += 1
        ahead = t0 + n / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
