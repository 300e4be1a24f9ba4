"""What a node's sidecar ships from NCCL's telemetry: a communicator this node holds whole goes
out as a group, one spanning nodes as this node's part of it, which it repeats on demand."""

from __future__ import annotations

import orjson

from c4.proto import c4_pb2
from diagnosis.nccl.live import NcclNode

_PID0 = 4000


def _line(pid: int, rank: int, n_ranks: int, comm: str, sn: int) -> bytes:
    return orjson.dumps({
        "header": {"id": comm, "comm_name": f"comm {comm}", "rank": rank, "n_ranks": n_ranks,
                   "nnodes": 1},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                     "rec_mechanism": "nccl_profiler_interface",
                     "dump_timestamp_us": 1_700_000_000_000_000 + 1000 * sn,
                     "hostname": "node1", "pid": pid},
        "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1 << 20,
                      "coll_exec_time_us": 150, "coll_timing_source": "kernel_gpu",
                      "coll_algobw_gbs": 7.0, "coll_busbw_gbs": 9.3}}) + b"\n"


def test_a_communicator_spanning_nodes_is_shipped_as_this_nodes_part(tmp_path):
    # global ranks 2 and 3 live here; "0xaa" is the job's 4-rank world (ranks 0-1 elsewhere),
    # "0xbb" a 2-rank communicator of this node's two processes
    for r in (2, 3):
        with open(tmp_path / f"node1-pid{_PID0 + r}.log", "wb") as fh:
            for sn in range(3):
                fh.write(_line(_PID0 + r, r, 4, "0xaa", sn) + _line(_PID0 + r, r - 2, 2, "0xbb",
                                                                    sn))
    node = NcclNode(inspector_dir=tmp_path, rank_of=lambda pid: pid - _PID0,
                    world_of=lambda pid: 4, hosts=set())
    msgs = node.step().messages("j")
    groups = [m for m in msgs if isinstance(m, c4_pb2.GroupInfo)]
    whole = [(list(g.ranks), g.size) for g in groups if not g.size]
    parts = [(list(g.positions), list(g.ranks), g.size) for g in groups if g.size]
    assert whole == [([2, 3], 0)]
    assert parts == [([2, 3], [2, 3], 4)]
    # the group records come before the op rows that use them
    kinds = [type(m).__name__ for m in msgs]
    assert kinds.index("OpBatch") > max(i for i, k in enumerate(kinds) if k == "GroupInfo")
    # nothing new: no part again until asked for (a daemon that restarted), then the same one
    again = [m for m in node.step().messages("j") if isinstance(m, c4_pb2.GroupInfo)]
    assert again == []
    repeat = [m for m in node.parts().messages("j") if isinstance(m, c4_pb2.GroupInfo)]
    assert [(list(g.positions), list(g.ranks), g.size) for g in repeat] == parts
    # the daemon's joined group: this node's part is no longer repeated
    pg = repeat[0].pg
    node.learn_group(pg, (0, 1, 2, 3))
    assert node.parts().members == []
