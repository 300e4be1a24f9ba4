"""An example training script that recovers: data-parallel MLP on gloo, checkpointing through
``recovery.checkpoint`` and resuming from the newest complete checkpoint. Run it under
``c4 launch`` (the tests and ``bench/recovery.py`` do).

The data of step s is a function of s alone (one global batch, split across the ranks), so the
loss at a step does not depend on the world size: after a restart on fewer nodes, the first
step repeats the loss it had before, up to float rounding.

Settings (environment): C4_TRAIN_STEPS, C4_TRAIN_CKPT_DIR, C4_TRAIN_CKPT_EVERY,
C4_TRAIN_WORK (matrix products per step: the CPU work a throttled host slows down),
C4_TRAIN_BATCH (global batch; divisible by every world size used), C4_TRAIN_FAULT_FILE (a
planted process-level fault for machines where cgroups are out of reach: while this JSON file
maps the rank's host, C4_HOST, to N, each step computes N ms longer, like a throttled GPU),
C4_TRAIN_HIDDEN (hidden width: the all-reduce's size), C4_TRAIN_GRID=1 (sum the gradients in
two stages over a grid of hosts, rows then columns, as 2D-parallel jobs do: the same sum as one
all-reduce, but every host pair's traffic runs in small groups whose health can be compared).
"""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from recovery.checkpoint import Checkpointer


class TrainState(Stateful):
    """Model and optimizer as DCP sees them (fully qualified names, not parameter ids)."""

    def __init__(self, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
        self.model, self.optim = model, optim

    def state_dict(self) -> dict:
        model_sd, optim_sd = get_state_dict(self.model, self.optim)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(self.model, self.optim, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])


def _install_collectors() -> None:
    try:
        import collectors
    except ImportError:
        return
    # the supervisor's attempt number (C4_ATTEMPT) is read from the environment
    collectors.install()


class PlantedSlowdown:
    """Reads the fault file when it changes (one stat per step) and sleeps what it says."""

    def __init__(self, path: str | None, host: str) -> None:
        self.path, self.host = path, host
        self.mtime = 0.0
        self.ms = 0.0

    def __call__(self) -> None:
        if not self.path:
            return
        try:
            mtime = os.stat(self.path).st_mtime
        except FileNotFoundError:
            self.ms = self.mtime = 0.0
            return
        if mtime != self.mtime:
            self.mtime = mtime
            try:
                with open(self.path) as fh:
                    self.ms = float(json.load(fh).get(self.host, 0))
            except (OSError, ValueError, AttributeError):
                self.ms = 0.0
        if self.ms > 0:
            time.sleep(self.ms / 1000)


def grid_groups(world: int, per_host: int) -> list[dist.ProcessGroup] | None:
    """Row and column groups of this rank over a 2 x (hosts/2) grid of hosts, or None when the
    hosts do not form one. Every rank creates every group, in the same order."""
    hosts = world // per_host
    if world % per_host or hosts < 4 or hosts % 2:
        return None
    cols = hosts // 2
    rank = dist.get_rank()
    host = rank // per_host
    mine: list[dist.ProcessGroup] = []
    for line in ([[r * cols + c for c in range(cols)] for r in range(2)]
                 + [[r * cols + c for r in range(2)] for c in range(cols)]):
        ranks = [h * per_host + i for h in line for i in range(per_host)]
        group = dist.new_group(ranks)
        if host in line:
            mine.append(group)
    return mine


def main() -> None:
    _install_collectors()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    steps = int(os.environ.get("C4_TRAIN_STEPS", "200"))
    every = int(os.environ.get("C4_TRAIN_CKPT_EVERY", "5"))
    work = int(os.environ.get("C4_TRAIN_WORK", "20"))
    batch = int(os.environ.get("C4_TRAIN_BATCH", "48"))
    if batch % world:
        raise SystemExit(f"C4_TRAIN_BATCH={batch} is not divisible by the world size {world}")
    torch.manual_seed(0)
    hidden = int(os.environ.get("C4_TRAIN_HIDDEN", "128"))
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, 10))
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    grid = grid_groups(world, per_host) if os.environ.get("C4_TRAIN_GRID") == "1" else None
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = {"train": TrainState(model, optim)}
    ckpt = Checkpointer(os.environ.get("C4_TRAIN_CKPT_DIR", "checkpoints"))
    start = ckpt.load(state) or 0
    burn = torch.randn(192, 192)
    planted = PlantedSlowdown(os.environ.get("C4_TRAIN_FAULT_FILE"), os.environ.get("C4_HOST", ""))
    share = batch // world
    for step in range(start, steps):
        gen = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(batch, 64, generator=gen)[rank * share:(rank + 1) * share]
        y = torch.randint(0, 10, (batch,), generator=gen)[rank * share:(rank + 1) * share]
        loss_sum = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
        optim.zero_grad()
        (loss_sum / batch).backward()
        acc = burn
        for _ in range(work):  # the rest of a real step's compute
            acc = torch.tanh(acc @ burn)
        planted()
        # one bucket, like DDP with a single gradient bucket: gradients and the loss together
        # every parameter takes part in the loss, so each has its gradient now
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads] + [loss_sum.detach().reshape(1)])
        if grid is None:
            dist.all_reduce(flat)
        else:  # row sum, then column sum: every rank ends with the sum over all ranks
            for group in grid:
                dist.all_reduce(flat, group=group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        optim.step()
        ckpt.step_done(step, loss=flat[-1].item() / batch, world_size=world)
        if (step + 1) % every == 0 and step + 1 < steps:
            ckpt.save(step + 1, state)
    ckpt.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
