"""A stopped rank recorded on a real GPU job (fixtures/h100_stopped_rank, see its README): the
2.30 Inspector's p2p lines, real NCCL RAS reports (one of them not valid JSON as NCCL 2.28
writes it), the Inspector's cut communicator ids matched with RAS's, and the diagnosis: rank 3
never entered round 100, and nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnosis.nccl.analyze import analyze_nccl
from diagnosis.nccl.ids import inspector_id
from diagnosis.nccl.inspector import find_inspector_files, read_inspector_file
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.ras import read_ras_file
from diagnosis.nccl.sources import read_sources

FIXTURES = Path(__file__).parent / "fixtures" / "h100_stopped_rank"
WORLD = 0x9724c3093d6a823f
PIDS = {1302: 0, 1303: 1, 1304: 2, 1305: 3}


def test_the_inspectors_p2p_lines_are_every_send_and_recv_of_the_ring():
    for path in find_inspector_files(FIXTURES / "inspector"):
        (b,) = read_inspector_file(path)
        rank = PIDS[b.procs[0][1]]
        ops = np.asarray(b.ops, dtype=object)[b.op]
        send, recv = ops == "send", ops == "recv"
        assert send.sum() == recv.sum() == 200 and (ops == "all_reduce").sum() == 401
        # a communicator rank; on the world communicator it is the global rank
        assert set(b.peer[send].tolist()) == {(rank + 1) % 4}
        assert set(b.peer[recv].tolist()) == {(rank - 1) % 4}
        assert (b.msg_bytes[send | recv] == 256 << 10).all() and (b.exec_us[send] > 0).all()
        # the Inspector writes the hash's first 14 hex digits only
        assert inspector_id(WORLD) in {c.hash for c in b.comms}


def test_ras_while_the_rank_slept_counts_its_launches_behind():
    (idle,) = read_ras_file(FIXTURES / "ras-idle.json")
    assert idle.format == "json" and idle.nccl_version == "2.28.9"
    world = next(c for c in idle.comms if c.hash == WORLD)
    assert {r.rank: (r.pid, r.counts["AllReduce"]) for r in world.ranks} == {
        0: (1302, 200), 1: (1303, 200), 2: (1304, 200), 3: (1305, 100)}
    assert not world.missing and sorted(c.size for c in idle.comms) == [2, 2, 4]
    (text,) = read_ras_file(FIXTURES / "ras-idle.txt")
    entry = next(e for e in text.entries if e.hash == WORLD)
    assert (entry.what, entry.op, entry.buckets) == ("counts", "AllReduce", ((3, 200), (1, 100)))
    assert [(m.rank, m.pid, m.value) for m in entry.members] == [(3, 1305, 100)]


def test_ras_while_the_process_was_stopped():
    (text,) = read_ras_file(FIXTURES / "ras-frozen.txt")
    assert [(p.pid, p.node) for p in text.incomplete] == [(1305, "127.0.0.1")]
    assert [(e.hash, e.what, [m.rank for m in e.members]) for e in text.entries] == [
        (WORLD, "missing", [3])]
    problems = Problems()
    (snap,) = read_ras_file(FIXTURES / "ras-frozen-missing-comma.json", problems)
    assert problems.counts["ras_json_comma"] == 2       # one per missing rank's entry
    assert [p.line for p in problems.seen] == [86, 183]
    world = next(c for c in snap.comms if c.size == 4)
    assert [r.rank for r in world.ranks] == [0, 1, 2]
    assert [(m.rank, m.pid, m.unresponsive, m.considered_dead) for m in world.missing] == [
        (3, 1434, True, False)]
    assert snap.timeouts == 2 and snap.collection_s == 3.001


def test_rank_3_is_the_one_hang_from_the_inspector_alone_and_with_ras():
    for ras in ([], [FIXTURES / "ras-idle.json"]):
        reports, stats = analyze_nccl(read_sources(inspector=[FIXTURES / "inspector"], ras=ras))
        # RAS's whole ids and the Inspector's cut ones are the same communicators
        assert (stats.ranks, stats.groups, stats.incomplete_groups) == (4, 3, 0)
        assert [(r.kind, r.suspects[0].rank, r.seq) for r in reports] == \
            [("noncomm_hang", 3, 100)], [r.summary for r in reports]
        # the job went on after 40 s: an incident that cleared
        assert reports[0].state == "resolved" and reports[0].evidence["cleared"]
