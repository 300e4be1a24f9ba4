"""Record calls through the hooks' unrolled hot path and through the plain tail (not a test
module): ``record`` is shared by tests/collectors/test_hook_paths.py, which runs it in its own
process on a one-rank group, and by this script's ``__main__``, one rank of a two-rank gloo job
whose point-to-point calls succeed; it prints, per async timing mode, both recordings as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from collector_testkit import wait_for

from collectors.buffer import RecordBuffer
from collectors.completion import MODES
from collectors.hook import Recorder

Recording = tuple[list[list], list[str], int]


def record(calls: Callable[[], int], mode: str, plain: bool) -> Recording:
    """The rows ``calls`` leaves (string indexes as names, times checked and dropped), the
    error texts, and how many calls went through the plain tail (``Recorder._make_invoke``,
    used for every group when ``plain``)."""
    buf = RecordBuffer(1024)
    rec = Recorder(buf, on_attach=lambda: None, async_timing=mode)
    through_plain: list[int] = []
    if plain:
        tail = rec._invoke_wall

        def counted(*args):
            through_plain.append(1)
            return tail(*args)

        rec._invoke_for = lambda pg: counted
    rec.patch()
    try:
        n = calls()
        wait_for(lambda: len(buf.rows) == n and not rec.done._waiting, 10,
                 f"{n} completed rows ({mode})")
    finally:
        rec.unpatch()
    assert buf.pending == {} and buf.dropped_full == 0
    names = buf.strings.strings
    rows = []
    for pg, seq, op, nbytes, dt, t_enter, t_start, t_end, status, peer in buf.rows:
        assert 0 < t_enter <= t_end and t_start == -1
        rows.append([names[pg], seq, names[op], nbytes, names[dt], status, peer])
    return rows, sorted(buf.errors.values()), len(through_plain)


def _exchange() -> int:
    """Blocking and async sends and receives with the other rank, then an all_reduce."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    peer = 1 - rank
    out, inbox = torch.full((8,), float(rank)), torch.empty(8)
    if rank == 0:
        dist.send(out, peer)
        dist.recv(inbox, peer)
    else:
        dist.recv(inbox, peer)
        dist.send(out, peer)
    assert float(inbox[0]) == peer
    works = [dist.isend(torch.ones(4, dtype=torch.int64), peer),
             dist.irecv(torch.empty(4, dtype=torch.int64), peer)]
    for w in works:
        w.wait()
    dist.all_reduce(out)
    return 5


if __name__ == "__main__":
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    result = {mode: {"inline": record(_exchange, mode, False),
                     "plain": record(_exchange, mode, True)} for mode in MODES}
    print(json.dumps({"rank": dist.get_rank(), "modes": result}), flush=True)
    dist.destroy_process_group()
