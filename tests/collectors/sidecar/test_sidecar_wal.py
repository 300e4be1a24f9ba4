"""The write-ahead log: records framed with checksums (a corrupt one loses itself only, a torn
tail is skipped), appends that fail leave nothing behind, and the spill built on it rebuilds
exactly the requests a crashed sidecar had not had acknowledged, deleting segments oldest first
only once nothing needs them."""

from __future__ import annotations

import os

import pytest

from c4.proto import c4_pb2
from c4.proto.codec import decode_ops
from collectors.sidecar.errors import LogCorrupt, LogFull
from collectors.sidecar.spill import Spill
from collectors.sidecar.wal import Log
from tests.support.frames import op_batch, rank_info
from tests.support.mounts import tmpfs


def _flip(path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x5A]))


def test_a_corrupt_record_loses_only_itself_and_a_torn_tail_is_skipped(tmp_path):
    log = Log(tmp_path, max_bytes=1 << 20)
    positions = log.append([(1, f"record {i}".encode() * 20) for i in range(10)])
    log.close()
    seg = positions[0].segment
    _flip(log.path(seg), positions[4].offset + 30)        # inside a body
    _flip(log.path(seg), positions[7].offset + 5)         # inside a length field
    with open(log.path(seg), "ab") as fh:                 # a crash in the middle of a write
        fh.write(log.path(seg).read_bytes()[:40])
    again = Log(tmp_path, max_bytes=1 << 20)
    bodies = [body for _, _, body in again.scan(seg)]
    assert bodies == [f"record {i}".encode() * 20 for i in range(10) if i not in (4, 7)]
    assert again.corrupt_regions == 2
    with pytest.raises(LogCorrupt):
        again.read(positions[4])
    assert again.read(positions[5]) == (1, b"record 5" * 20)


def test_appends_over_the_bound_are_refused_whole(tmp_path):
    log = Log(tmp_path, max_bytes=1000, segment_bytes=400)
    log.append([(1, b"x" * 300)])
    with pytest.raises(LogFull):
        log.append([(1, b"y" * 700)])
    assert log.bytes == 313
    log.append([(1, b"z" * 300)])  # a new segment: the first would exceed its size
    assert len(log.segments()) == 2


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)")
def test_a_full_disk_leaves_no_partial_record(tmp_path):
    with tmpfs(tmp_path / "small", "64k") as small:
        log = Log(small, max_bytes=1 << 30, segment_bytes=1 << 20)
        written = 0
        with pytest.raises(LogFull):
            for _ in range(100):
                log.append([(1, os.urandom(3000))])
                written += 1
        size = log.path(log.segments()[0]).stat().st_size
        assert size == log.bytes == written * 3013  # cut back to the last whole record
        assert not [p for p in small.iterdir() if not p.name.endswith(".c4wal")]
        log.close()


def _frame(spill: Spill, seqs: range, fno: int, cid: str = "c1", compress: bool = False):
    req = op_batch("j", 0, seqs)
    req.sidecar, req.seq = cid, fno
    return spill.append_frame(1000, 42, cid, fno, req.SerializeToString(), len(seqs), ("j", 0),
                              compress=compress)


def test_recovery_rebuilds_unacknowledged_requests_under_their_own_numbers(tmp_path):
    spill = Spill(tmp_path, 1 << 30, segment_bytes=64 << 10)
    rank = c4_pb2.IngestRequest(sidecar="car-1", seq=1, rank=rank_info("j", 0, 1, "n").rank)
    held_rank = spill.append_request(rank)
    # frames logged while the daemon was away are compressed; they read back the same
    frames = [_frame(spill, range(i * 100, i * 100 + 100), i + 1, compress=i % 2 == 1)
              for i in range(6)]
    held_a = spill.append_cut("car-1", 2, frames[:3])
    held_b = spill.append_cut("car-1", 3, frames[3:5])
    spill.release(held_rank)  # acknowledged
    spill.release(held_a)
    spill.sync()
    del spill  # a crash: no close

    again = Spill(tmp_path, 1 << 30)
    got = {(r.sidecar, r.seq): r for r in again.recovery.requests}
    # everything still in the log comes back (acknowledged ones too: the daemon recognizes them)
    assert set(got) == {("car-1", 1), ("car-1", 2), ("car-1", 3)}
    loaded = again.load(got[("car-1", 3)].held, "car-1", 3).request
    assert (loaded.sidecar, loaded.seq) == ("car-1", 3)
    assert decode_ops(loaded.ops)["seq"].tolist() == list(range(300, 500))
    # the frame never cut comes back to be batched afresh; its number is remembered
    assert [f.records for f in again.recovery.frames] == [100]
    assert again.recovery.watermarks == {(1000, "c1"): 6}
    del held_b


def test_segments_go_oldest_first_once_unreferenced(tmp_path):
    spill = Spill(tmp_path, 1 << 30, segment_bytes=8 << 10)
    frames = [_frame(spill, range(i * 100, i * 100 + 100), i + 1) for i in range(8)]
    cuts = [spill.append_cut("car-1", i + 1, [f]) for i, f in enumerate(frames)]
    segments = spill.segments()
    assert len(segments) >= 3
    for held in cuts[1:]:  # everything but the oldest request is acknowledged
        spill.release(held)
    # the oldest segment is still needed, so nothing after it goes either: deleting a newer
    # one could lose the cut of a frame in an older one
    assert spill.segments() == segments
    spill.release(cuts[0])
    assert spill.segments() in ([], [segments[-1]])  # the current one may stay
    spill.close()
    assert not list(tmp_path.iterdir())  # all delivered: closing leaves the directory empty


def test_closing_keeps_the_segments_of_undelivered_requests(tmp_path):
    spill = Spill(tmp_path, 1 << 30, segment_bytes=8 << 10)
    frames = [_frame(spill, range(i * 100, i * 100 + 100), i + 1) for i in range(4)]
    delivered = spill.append_cut("car-1", 1, frames[:2])
    spill.append_cut("car-1", 2, frames[2:])
    spill.release(delivered)
    spill.close()
    again = Spill(tmp_path, 1 << 30)
    assert ("car-1", 2) in {(r.sidecar, r.seq) for r in again.recovery.requests}


def test_frames_waiting_for_the_daemon_take_a_fifth_of_the_room(tmp_path):
    plain, packed = Spill(tmp_path / "a", 1 << 30), Spill(tmp_path / "b", 1 << 30)
    for i in range(20):
        _frame(plain, range(i * 500, i * 500 + 500), i + 1)
        _frame(packed, range(i * 500, i * 500 + 500), i + 1, compress=True)
    assert packed.bytes * 3 < plain.bytes
