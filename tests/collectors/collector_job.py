"""One rank of the rich gloo job used by test_collector_gloo.py (not a test module itself).

Calls every hooked operation, synchronous and async, on the world group and on a subgroup, plus
point-to-point traffic, a failing call, a call that times out and a late rank. It writes the calls
it made (its own truth, independent of the collector) as JSON to ``argv[1]``.

argv[2]: "install" (call collectors.install()) or "auto" (rely on `c4 run`).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

mode = sys.argv[2]
if mode == "install":
    import collectors

    collectors.install()

import torch  # noqa: E402  (after install(), as a training script would do it)
import torch.distributed as dist  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
sub_members = [0, 2]
sub = dist.new_group(sub_members)
# Only ranks 0 and 1 use it, and only rank 0 calls: a timeout on rank 0.
short = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=1))
calls: list[dict] = []


def nb(x) -> int:
    if isinstance(x, list):
        return sum(t.numel() * t.element_size() for t in x)
    return x.numel() * x.element_size()


def call(pg, op, fn, nbytes, peer=-1, is_async=False, expect="ok"):
    calls.append({"pg": pg.group_name, "op": op, "bytes": nbytes, "peer": peer,
                  "async": is_async, "status": expect})
    if expect != "ok":
        try:
            fn()
        except RuntimeError:
            return
        raise AssertionError(f"{op} was expected to fail")
    out = fn()
    if is_async:
        works = out if isinstance(out, list) else [out]
        for w in works:
            w.wait()


def collectives(pg, async_op):
    gs = dist.get_world_size(pg)
    me = dist.get_rank(pg)
    root = dist.get_global_rank(pg, 0)
    kw = {"group": pg, "async_op": async_op}
    t = torch.ones(6) * rank
    call(pg, "all_reduce", lambda: dist.all_reduce(t, **kw), 24, is_async=async_op)
    small = torch.ones(3, dtype=torch.float64)
    call(pg, "all_gather", lambda: dist.all_gather([torch.empty(3, dtype=torch.float64)
                                                     for _ in range(gs)], small, **kw),
         24, is_async=async_op)
    call(pg, "all_gather_into_tensor",
         lambda: dist.all_gather_into_tensor(torch.empty(2 * gs), torch.ones(2), **kw), 8,
         is_async=async_op)
    ins = [torch.ones(4, dtype=torch.int32) for _ in range(gs)]
    call(pg, "reduce_scatter",
         lambda: dist.reduce_scatter(torch.empty(4, dtype=torch.int32), ins, **kw), nb(ins),
         is_async=async_op)
    call(pg, "reduce_scatter_tensor",
         lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * gs), **kw), 8 * gs,
         is_async=async_op)
    call(pg, "broadcast", lambda: dist.broadcast(t, src=root, **kw), 24, is_async=async_op)
    call(pg, "reduce", lambda: dist.reduce(t, dst=root, **kw), 24, is_async=async_op)
    a2a_in = [torch.ones(2) for _ in range(gs)]
    call(pg, "all_to_all",
         lambda: dist.all_to_all([torch.empty(2) for _ in range(gs)], a2a_in, **kw),
         nb(a2a_in), is_async=async_op)
    call(pg, "all_to_all_single",
         lambda: dist.all_to_all_single(torch.empty(2 * gs), torch.ones(2 * gs), **kw),
         8 * gs, is_async=async_op)
    call(pg, "barrier", lambda: dist.barrier(**kw), 0, is_async=async_op)
    gl = [torch.empty(6) for _ in range(gs)] if me == 0 else None
    call(pg, "gather", lambda: dist.gather(t, gl, dst=root, **kw), 24, is_async=async_op)
    sl = [torch.ones(6) for _ in range(gs)] if me == 0 else None
    call(pg, "scatter", lambda: dist.scatter(t, sl, src=root, **kw), 24, is_async=async_op)


world_pg = dist.group.WORLD
for async_op in (False, True):
    collectives(world_pg, async_op)
    if rank in sub_members:
        collectives(sub, async_op)
    else:
        dist.all_reduce(torch.ones(2), group=sub)  # not a member: torch does nothing, nor do we

# Point-to-point between global ranks 0 and 1 on the world group.
buf = torch.zeros(5)
if rank in (0, 1):
    other = 1 - rank
    if rank == 0:
        call(world_pg, "send", lambda: dist.send(buf, 1), 20, peer=1)
        call(world_pg, "recv", lambda: dist.recv(buf, 1), 20, peer=1)
        call(world_pg, "isend", lambda: dist.isend(buf, dst=1), 20, peer=1, is_async=True)
        call(world_pg, "irecv", lambda: dist.irecv(buf, src=1), 20, peer=1, is_async=True)
        call(world_pg, "recv", lambda: dist.recv(buf), 20, peer=1)  # any source
    else:
        call(world_pg, "recv", lambda: dist.recv(buf, 0), 20, peer=0)
        call(world_pg, "send", lambda: dist.send(buf, 0), 20, peer=0)
        call(world_pg, "irecv", lambda: dist.irecv(buf, src=0), 20, peer=0, is_async=True)
        call(world_pg, "isend", lambda: dist.isend(buf, dst=0), 20, peer=0, is_async=True)
        call(world_pg, "send", lambda: dist.send(buf, 0), 20, peer=0)
    ops = [dist.P2POp(dist.isend, torch.ones(3), other),
           dist.P2POp(dist.irecv, torch.zeros(3), other)]
    calls.append({"pg": world_pg.group_name, "op": "isend", "bytes": 12, "peer": other,
                  "async": True, "status": "ok"})
    calls.append({"pg": world_pg.group_name, "op": "irecv", "bytes": 12, "peer": other,
                  "async": True, "status": "ok"})
    for w in dist.batch_isend_irecv(ops):
        w.wait()
# Point-to-point on the subgroup, addressed by group rank: global 0 <-> global 2.
if rank == 0:
    call(sub, "send", lambda: dist.send(torch.ones(7), group=sub, group_dst=1), 28, peer=2)
elif rank == 2:
    call(sub, "recv", lambda: dist.recv(torch.ones(7), group=sub, group_src=0), 28, peer=0)

# A failing call: every rank raises before any traffic.
call(world_pg, "broadcast", lambda: dist.broadcast(torch.ones(2), src=world + 4), 8,
     expect="error")
# A late rank: the others wait in the barrier long enough to be reported open first.
if rank == 1:
    time.sleep(0.8)
call(world_pg, "barrier", lambda: dist.barrier(), 0)
# A call that times out on rank 0 (rank 1 never joins it).
if rank == 0:
    call(short, "all_reduce", lambda: dist.all_reduce(torch.ones(2), group=short), 8,
         expect="timeout")
call(world_pg, "barrier", lambda: dist.barrier(), 0)

groups = {world_pg.group_name: dist.get_process_group_ranks(world_pg)}
if rank in sub_members:
    groups[sub.group_name] = sub_members
with open(sys.argv[1].format(rank), "w") as f:
    json.dump({"rank": rank, "calls": calls, "groups": groups}, f)
if mode == "install":
    import collectors

    collectors.uninstall()  # ships the tail before exit (also done at exit)
dist.destroy_process_group()
