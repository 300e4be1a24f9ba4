"""The hooks' unrolled hot path against the plain one: ``Recorder._wrap_collective`` and
``_wrap_p2p`` repeat the tail of a call inline (one Python call less per hooked call), and
``Recorder._make_invoke`` is that tail as a function, which groups timed another way (CUDA
events) go through. The same calls, recorded once each way, give the same rows: same groups,
sequence numbers, ops, sizes, dtypes, peers, statuses and error texts, with every call
completed, in each async timing mode; on a real one-rank gloo group in this process
(collectives, and calls torch refuses) and in a real two-rank gloo job (point-to-point calls
that succeed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from collector_testkit import launch_ranks, wait_ranks
from hook_paths_job import record

from collectors.completion import MODES, OK

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.network



def _calls() -> int:
    """Sync and async collectives, tensor and list data, a barrier, and calls torch refuses
    (collective and point-to-point); returns how many calls were made."""
    t, out = torch.ones(16), [torch.empty(16)]
    dist.all_reduce(t)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.all_reduce(torch.ones(3, dtype=torch.float64), async_op=True).wait()
    dist.broadcast(t, src=0)
    dist.all_gather(out, t)
    dist.all_gather(out, t, async_op=True).wait()
    dist.barrier()
    with pytest.raises(RuntimeError, match="invalid root rank"):
        dist.broadcast(t, src=3)
    with pytest.raises(ValueError, match="destination rank"):
        dist.send(t, dst=0)
    with pytest.raises(RuntimeError):
        dist.isend(torch.ones(2, dtype=torch.int32), dst=0).wait()
    return 10


@pytest.mark.parametrize("mode", MODES)
def test_the_unrolled_path_records_what_the_plain_path_does(one_rank_group, mode):
    inline, inline_errors, inline_plain = record(_calls, mode, plain=False)
    plain, plain_errors, plain_calls = record(_calls, mode, plain=True)
    assert inline_plain == 0 and plain_calls == len(plain) == 10
    # async completions may land in another order; each call's row is the same
    assert sorted(inline) == sorted(plain)
    assert inline_errors == plain_errors and len(inline_errors) == 3
    world = dist.group.WORLD.group_name
    ops = sorted((r[2], r[1], r[3], r[4], r[5] == OK, r[6]) for r in inline if r[0] == world)
    # one sequence per group for collectives, one per (direction, peer) for point-to-point
    assert ops == [
        ("all_gather", 4, 64, "float32", True, -1), ("all_gather", 5, 64, "float32", True, -1),
        ("all_reduce", 0, 64, "float32", True, -1), ("all_reduce", 1, 64, "float32", True, -1),
        ("all_reduce", 2, 24, "float64", True, -1), ("barrier", 6, 0, "", True, -1),
        ("broadcast", 3, 64, "float32", True, -1), ("broadcast", 7, 64, "float32", False, -1),
        ("isend", 1, 8, "int32", False, 0), ("send", 0, 64, "float32", False, 0)]


@pytest.mark.multiprocess
def test_point_to_point_calls_that_succeed_record_alike_on_both_paths():
    """Two ranks: blocking and async sends and receives between them, then an all_reduce."""
    procs = launch_ranks(Path(__file__).with_name("hook_paths_job.py"), 2, {}, [])
    for out in wait_ranks(procs, timeout=120):
        line = next(ln for ln in out.splitlines() if ln.startswith('{"rank"'))
        result = json.loads(line)
        rank, peer = result["rank"], 1 - result["rank"]
        for mode, got in result["modes"].items():
            (inline, inline_errors, inline_plain) = got["inline"]
            (plain, plain_errors, plain_calls) = got["plain"]
            assert inline_plain == 0 and plain_calls == 5, mode
            assert sorted(inline) == sorted(plain) and inline_errors == plain_errors == [], mode
            assert sorted((r[2], r[1], r[3], r[4], r[5], r[6]) for r in inline) == [
                ("all_reduce", 0, 32, "float32", OK, -1),
                ("irecv", 1, 32, "int64", OK, peer), ("isend", 1, 32, "int64", OK, peer),
                ("recv", 0, 32, "float32", OK, peer), ("send", 0, 32, "float32", OK, peer)], \
                (rank, mode)
