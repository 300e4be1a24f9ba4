"""The lab's built-in training job: data parallel x pipeline parallel on gloo, collectors on.

``C4_LAB_PP`` pipeline stages (default 2); rank = stage * dp + replica, so with ranks filling
hosts in order a stage spans whole hosts and the pipeline's send/recv crosses hosts (and,
with two hosts per leaf on a four-host lab, leaves). Stage 0 computes the first half of an
MLP and sends its activations to the same replica of stage 1, which computes the loss and sends
back their gradient; each stage then all-reduces its gradients across its replicas.

Environment: ``C4_LAB_STEPS`` (default 60), ``C4_LAB_BATCH`` (64), ``C4_LAB_WIDTH`` (512),
``C4_LAB_COMPUTE_MS`` (extra compute per step, default 10: a fixed amount of CPU work
calibrated at start, so that a CPU quota on the rank, the lab's slow GPU, makes it take
longer), ``C4_LAB_CKPT_DIR`` and ``C4_LAB_CKPT_EVERY`` (save each stage's state every N steps,
off by default; a job started with a directory that holds a complete checkpoint, every stage
at the same step, resumes from the latest one).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

import collectors


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _calibrate(ms: int, n: int = 128) -> tuple[torch.Tensor, int]:
    """A matrix and a count of matmuls that take about ``ms`` milliseconds here, now."""
    a = torch.randn(n, n)
    t0, reps = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.2:
        a @ a
        reps += 1
    per_ms = reps / ((time.perf_counter() - t0) * 1000)
    return a, max(1, round(per_ms * ms))


def _grad(t: torch.Tensor) -> torch.Tensor:
    """The gradient backward() left on ``t`` (every parameter and the received input take part
    in the loss)."""
    if t.grad is None:
        raise RuntimeError("backward() left no gradient on a tensor that takes part in the loss")
    return t.grad


def _latest_complete(ckpt_dir: str | None, pp: int) -> int:
    """The last step for which every stage's checkpoint exists (0: none)."""
    if not ckpt_dir or not os.path.isdir(ckpt_dir):
        return 0
    steps: dict[int, set[int]] = {}
    for name in os.listdir(ckpt_dir):
        stem = name.removesuffix(".pt")
        if name.endswith(".pt") and stem.startswith("stage") and "-step" in stem:
            stage, step = stem[len("stage"):].split("-step")
            steps.setdefault(int(step), set()).add(int(stage))
    return max((st for st, stages in steps.items() if len(stages) == pp), default=0)


def main() -> None:
    collectors.install()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pp = _env("C4_LAB_PP", 2) if world % max(1, _env("C4_LAB_PP", 2)) == 0 else 1
    dp = world // pp
    stage, replica = divmod(rank, dp)
    # every rank creates every group, in the same order
    dp_groups = [dist.new_group(list(range(s * dp, (s + 1) * dp))) for s in range(pp)]
    dp_group = dp_groups[stage]
    torch.manual_seed(1234 + stage)
    torch.set_num_threads(1)
    width, batch = _env("C4_LAB_WIDTH", 512), _env("C4_LAB_BATCH", 64)
    layers = [torch.nn.Linear(width, width), torch.nn.ReLU()]
    if stage == pp - 1:
        layers.append(torch.nn.Linear(width, 10))
    model = torch.nn.Sequential(*layers)
    for p in model.parameters():  # replicas of a stage start equal
        dist.broadcast(p.data, src=stage * dp, group=dp_group)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = _env("C4_LAB_STEPS", 60)
    work, reps = _calibrate(_env("C4_LAB_COMPUTE_MS", 10))
    ckpt_dir, ckpt_every = os.environ.get("C4_LAB_CKPT_DIR"), _env("C4_LAB_CKPT_EVERY", 0)
    start = _latest_complete(ckpt_dir, pp)
    if start and ckpt_dir:
        saved = torch.load(os.path.join(ckpt_dir, f"stage{stage}-step{start}.pt"))
        model.load_state_dict(saved["model"])
        if rank == 0:
            print(f"resumed from the checkpoint of step {start}", flush=True)
    gen = torch.Generator().manual_seed(replica * 100003 + start)
    prev = rank - dp if stage > 0 else None
    nxt = rank + dp if stage < pp - 1 else None
    t0 = time.monotonic()
    for step in range(start, steps):
        if prev is None:
            inp = torch.randn(batch, width, generator=gen)
        else:
            inp = torch.empty(batch, width)
            dist.recv(inp, src=prev)
            inp.requires_grad_(True)
        out = model(inp)
        for _ in range(reps):  # the rest of a real stage's forward and backward
            work @ work
        opt.zero_grad()
        if nxt is None:
            y = torch.randint(0, 10, (batch,), generator=gen)
            loss = torch.nn.functional.cross_entropy(out, y)
            loss.backward()
        else:
            dist.send(out.detach(), dst=nxt)
            grad = torch.empty_like(out)
            dist.recv(grad, src=nxt)
            out.backward(grad)
        if prev is not None:
            dist.send(_grad(inp), dst=prev)
        for p in model.parameters():
            grad = _grad(p)
            dist.all_reduce(grad, group=dp_group)
            grad /= dp
        opt.step()
        if ckpt_dir and ckpt_every and (step + 1) % ckpt_every == 0 and replica == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            path = os.path.join(ckpt_dir, f"stage{stage}-step{step + 1}.pt")
            torch.save({"step": step + 1, "model": model.state_dict()}, path + ".tmp")
            os.replace(path + ".tmp", path)  # a crash never leaves a partial checkpoint
        if nxt is None and replica == 0 and step % 10 == 0:
            print(f"step {step}: loss {loss.item():.4f} ({time.monotonic() - t0:.1f} s)",
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
