"""What a local connection may say (in process, peers with made-up uids; the real-process
version with two local users is test_sidecar_trust.py): a job is its first user's, statistics
only for ranks a connection registered, a resent frame is taken once, oversized bodies are
refused before parsing."""

from __future__ import annotations

import pytest

from c4.proto import c4_pb2
from collectors.sidecar.batcher import Batcher
from collectors.sidecar.counters import Drops
from collectors.sidecar.intake import Intake, Peer
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.owners import Owners
from collectors.sidecar.spill import Spill
from collectors.wire import FrameError
from tests.support.frames import op_batch, rank_info

ALICE, BOB = 1001, 1002


@pytest.fixture
def node(tmp_path):
    spill = Spill(tmp_path / "log", 1 << 30)
    outbox = Outbox("car", spill, memory_max_bytes=1 << 26, max_inflight=8)
    batcher = Batcher(outbox.put_frames, batch_records=1 << 20, flush_interval_s=3600)
    drops = Drops()
    intake = Intake(spill=spill, outbox=outbox, batcher=batcher, drops=drops,
                    owners=Owners(tmp_path / "log", trusted_uids=frozenset({0})),
                    max_collectors=3)
    yield intake, outbox, batcher, drops
    spill.close()


def _ops(job: str, rank: int, seqs: range, fno: int = 0, cid: str = "") -> bytes:
    req = op_batch(job, rank, seqs)
    req.sidecar, req.seq = cid, fno
    return req.SerializeToString()


def _stats(*ranks: tuple[str, int]) -> bytes:
    return c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(collectors=[
        c4_pb2.CollectorStats(job=job, rank=rank) for job, rank in ranks])).SerializeToString()


def test_a_job_is_its_first_users_and_stays_so(node, tmp_path):
    intake, outbox, _, drops = node
    alice, bob, root = Peer(ALICE, 10, ALICE), Peer(BOB, 20, BOB), Peer(0, 30, 0)
    intake.take(alice, rank_info("ja", 0, 2, "n").SerializeToString())
    receipt = intake.take(bob, _ops("ja", 1, range(50), fno=1, cid="bob-1"))
    assert receipt is not None and receipt.code  # told why, so it does not resend
    intake.take(bob, rank_info("ja", 1, 2, "n").SerializeToString())
    intake.take(root, _ops("ja", 0, range(10)))  # root may speak for any job
    assert drops.records() == {"not_owner": 50}
    assert drops.frames() == {"not_owner": 2}
    assert intake.received == 10
    # the owner survives a restart
    assert Owners(tmp_path / "log").owner("ja") == ALICE
    assert [e.req.rank.pid for e in outbox._queue if e.kind == "rank"] == [10]  # the peer's


def test_statistics_only_for_the_ranks_a_connection_registered(node):
    intake, _, _, drops = node
    peer = Peer(ALICE, 10, ALICE)
    intake.take(peer, _stats(("j", 0)))  # nothing registered yet
    intake.take(peer, rank_info("j", 0, 4, "n").SerializeToString())
    intake.take(peer, _stats(("j", 0)))
    intake.take(peer, _stats(("j", 1)))  # not its rank
    intake.take(peer, _stats(("j", 0), ("j", 0)))  # more entries than it registered
    assert [(c.job, c.rank) for c in intake.collectors.values()] == [("j", 0)]
    assert drops.frames() == {"bounds": 3}
    # the table is bounded: past max_collectors, newcomers wait for a stale entry
    for rank in (1, 2, 3):
        other = Peer(ALICE, 11 + rank, ALICE)
        intake.take(other, rank_info("j", rank, 4, "n").SerializeToString())
        intake.take(other, _stats(("j", rank)))
    assert len(intake.collectors) == 3
    assert drops.frames() == {"bounds": 4}


def test_a_resent_frame_is_taken_once(node):
    intake, outbox, batcher, _ = node
    peer = Peer(ALICE, 10, ALICE)
    intake.take(peer, rank_info("j", 0, 1, "n").SerializeToString())
    for fno in (1, 2, 1, 2, 3):  # 1 and 2 again, as after a reconnection
        assert intake.take(peer, _ops("j", 0, range(fno * 10, fno * 10 + 10), fno, "c1"))
    assert intake.received == 30 and intake.duplicate_frames == 2
    # the same collector id from another user is another collector
    intake.take(Peer(BOB, 20, BOB), rank_info("k", 0, 1, "n").SerializeToString())
    intake.take(Peer(BOB, 20, BOB), _ops("k", 0, range(10), 1, "c1"))
    assert intake.received == 40
    batcher.flush_due(force=True)
    assert sum(e.records for e in outbox._queue) == 40


def test_oversized_meta_bodies_are_refused_before_parsing_and_garbage_raises(node):
    intake, _, _, drops = node
    peer = Peer(ALICE, 10, ALICE)
    huge = c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job="j", host="x" * 100_000))
    assert intake.take(peer, huge.SerializeToString()) is None
    assert drops.frames() == {"bounds": 1}
    with pytest.raises(FrameError):
        intake.take(peer, b"\xff\xff\xff")
