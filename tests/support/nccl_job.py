"""A torchrun script for the GPU check (tests/gpu): each rank makes ``C4_TEST_CALLS`` rounds of
an all_reduce on the world group (``C4_TEST_MB`` MiB) and one on a pair group (1/16 of it),
after writing its pid to ``$C4_TEST_LOG/rank<R>.pid``; with ``C4_TEST_P2P=1`` also a ring
exchange (each rank sends the small tensor to the next rank and receives from the previous one).
One rank's GPU may be made slow, or one rank may stop before a call (see below). On a machine
with CUDA it runs NCCL on the GPUs, several ranks to a GPU when there are fewer GPUs than
ranks (each rank then gets an ``NCCL_HOSTID`` of its own: NCCL refuses two ranks of one host
on one GPU, and ranks of different "hosts" talk through its network transport); without CUDA,
gloo on the CPU (the harness's dry run). Relies on `c4 run` for the collector (no import of
it here)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def _cycles_per_ms() -> float:
    """How many cycles ``torch.cuda._sleep`` spins per millisecond on this GPU."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    return 10_000_000 / a.elapsed_time(b)


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    if cuda:
        ndev = torch.cuda.device_count()
        device = torch.device("cuda", local % ndev)
        torch.cuda.set_device(device)
        if ndev < local_world:
            # read by NCCL when it creates the first communicator, after this
            os.environ["NCCL_HOSTID"] = f"c4-gpu-check-{local}"
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pair = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)][rank // 2]
    log = Path(os.environ["C4_TEST_LOG"])
    log.mkdir(parents=True, exist_ok=True)
    (log / f"rank{rank}.pid").write_text(str(os.getpid()))
    n = int(float(os.environ.get("C4_TEST_MB", "4")) * (1 << 20)) // 4
    big = torch.ones(n, device=device)
    small = torch.ones(max(n // 16, 1), device=device)
    calls = int(os.environ.get("C4_TEST_CALLS", "200"))
    # a slow GPU: from call ``C4_TEST_SLOW_FROM`` on, rank ``C4_TEST_SLOW_RANK``'s stream spins
    # ``C4_TEST_SLOW_MS`` before each call (GPU time only: its CPU goes on enqueueing)
    slow = cuda and rank == int(os.environ.get("C4_TEST_SLOW_RANK", "-1"))
    slow_from = int(os.environ.get("C4_TEST_SLOW_FROM", "0"))
    spin = int(float(os.environ.get("C4_TEST_SLOW_MS", "20")) * _cycles_per_ms()) \
        if slow else 0
    # a stopped rank: rank ``C4_TEST_STOP_RANK`` waits for its GPU to finish, touches
    # ``C4_TEST_STOP_MARK`` and sleeps ``C4_TEST_STOP_S`` in Python before call
    # ``C4_TEST_STOP_AT``, while its peers wait for it inside that call
    stop_at = int(os.environ.get("C4_TEST_STOP_AT", "-1")) \
        if rank == int(os.environ.get("C4_TEST_STOP_RANK", "-1")) else -1
    p2p = os.environ.get("C4_TEST_P2P") == "1"
    inbox = torch.empty_like(small)
    for i in range(calls):
        if i == stop_at:
            if cuda:
                torch.cuda.synchronize()
            Path(os.environ["C4_TEST_STOP_MARK"]).touch()
            time.sleep(float(os.environ.get("C4_TEST_STOP_S", "30")))
        big.mul_(0.5)          # some work on the stream before each call
        if slow and i >= slow_from:
            torch.cuda._sleep(spin)
        dist.all_reduce(big)
        dist.all_reduce(small, group=pair)
        if p2p:
            ops = [dist.P2POp(dist.isend, small, (rank + 1) % world),
                   dist.P2POp(dist.irecv, inbox, (rank - 1) % world)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    # the collectors' shipper and the Inspector's dump thread get a moment before teardown
    time.sleep(float(os.environ.get("C4_TEST_LINGER_S", "2")))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
