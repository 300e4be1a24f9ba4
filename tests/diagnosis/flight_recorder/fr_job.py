"""A small gloo job with a planted fault that leaves real Flight Recorder dumps, one per rank.

Run as a script (the tests start it in a subprocess so that a stuck job can be killed):

    python fr_job.py --scenario hang --out DIR
    python fr_job.py --scenario mismatch --culprit 0 --out DIR

Every rank writes ``DIR/pickle/nccl_trace_rank_<rank>`` (``_dump_fr_trace()``) and
``DIR/json/fr_trace_<rank>.json`` (``_dump_fr_trace_json()``).

* ``hang`` (4 ranks): all ranks run two collectives on the world group and create the subgroup
  {2, 3}; then ranks 0 and 1 all_reduce on the world group, rank 2 all_reduces on {2, 3}, and
  the culprit (rank 3) never calls anything: it waits until the others have timed out and
  dumped, then dumps. Rank 2 is a victim waiting on rank 3; ranks 0 and 1 wait on both.
* ``mismatch`` (3 ranks): the culprit calls all_gather where everyone else calls all_reduce.
  (A size mismatch makes gloo abort the process before anyone can dump.)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import time
from pathlib import Path

TIMEOUT_S = 3


def _dump(out: Path, rank: int, stacks: bool) -> None:
    import torch

    c10d = torch._C._distributed_c10d
    (out / "pickle").mkdir(parents=True, exist_ok=True)
    (out / "json").mkdir(parents=True, exist_ok=True)
    tmp = out / "pickle" / f".nccl_trace_rank_{rank}.tmp"
    tmp.write_bytes(c10d._dump_fr_trace(includeStackTraces=stacks))
    tmp.rename(out / "pickle" / f"nccl_trace_rank_{rank}")  # atomic: pollers see whole files
    (out / "json" / f"fr_trace_{rank}.json").write_bytes(c10d._dump_fr_trace_json())


def _wait_for_dumps(out: Path, ranks: list[int], deadline_s: float = 90.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if all((out / "pickle" / f"nccl_trace_rank_{r}").exists() for r in ranks):
            return
        time.sleep(0.05)
    raise TimeoutError(f"ranks {ranks} did not dump within {deadline_s} s")


def _worker(rank: int, world: int, port: int, out: str, scenario: str, culprit: int,
            stacks_of: list[bool]) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    t = torch.ones(16)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    outdir = Path(out)
    stacks = stacks_of[rank]
    if scenario == "hang":
        pair = dist.new_group([2, 3], timeout=datetime.timedelta(seconds=TIMEOUT_S))
        if rank == culprit:
            _wait_for_dumps(outdir, [r for r in range(world) if r != culprit])
            _dump(outdir, rank, stacks)
            os._exit(0)  # skip destroy_process_group: its peers are gone
        with contextlib.suppress(RuntimeError):  # the planted timeout
            dist.all_reduce(t, group=pair if rank in (2, 3) else None)
    else:
        with contextlib.suppress(RuntimeError):  # the mismatch ends in a timeout
            if rank == culprit:
                dist.all_gather([torch.zeros(16) for _ in range(world)], t)
            else:
                dist.all_reduce(t)
    _dump(outdir, rank, stacks)
    os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", choices=("hang", "mismatch"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--culprit", type=int, default=None)
    ap.add_argument("--no-stacks", action="store_true", help="leave Python stacks out of dumps")
    ap.add_argument("--stacks-only-rank", type=int, default=None, metavar="RANK",
                    help="only this rank's pickle carries stacks (a process's first dump with "
                         "stacks symbolizes for seconds)")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    world = 4 if args.scenario == "hang" else 3
    culprit = args.culprit if args.culprit is not None else (3 if args.scenario == "hang" else 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args.out.mkdir(parents=True, exist_ok=True)
    stacks = [not args.no_stacks and args.stacks_only_rank in (None, r) for r in range(world)]
    mp.spawn(_worker, args=(world, port, str(args.out), args.scenario, culprit, stacks),
             nprocs=world)


if __name__ == "__main__":
    main()
