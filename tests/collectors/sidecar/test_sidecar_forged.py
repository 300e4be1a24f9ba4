"""Hostile or damaged input never blocks or deletes good data: forged collector statistics are
refused (the sidecar's own statistics stay small enough for the daemon), and a corrupt record
in the write-ahead log loses only itself. Real sidecar processes, a real daemon."""

from __future__ import annotations

import pytest

from c4.proto import c4_pb2
from collectors.wire import encode_frame
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.collectors.sidecar.harness import AckedRank, Car, stored_keys
from tests.support.frames import RankConnection, op_batch, rank_info
from tests.support.services import free_port, start_daemon, wait_for

pytestmark = [pytest.mark.network]


def _forged_stats(entries: int) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="node0", collectors=[
        c4_pb2.CollectorStats(job="evil", rank=i) for i in range(entries)]))


def test_forged_stats_are_refused_and_good_records_keep_flowing(tmp_path):
    # A daemon taking 1 MiB messages stands for the 64 MiB default (4M forged entries).
    daemon = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                                 max_message_bytes=1 << 20))
    daemon.start()
    car = Car(tmp_path, daemon.port).start()
    good = AckedRank(car.sock, "good", 0, 1)
    forger = RankConnection(car.sock)
    try:
        good.send_ops(range(0, 1000))
        forger.send(rank_info("evil", 0, 1, "node0"))
        forged = encode_frame(_forged_stats(300_000))  # ~3 MB of statistics per frame
        for _ in range(3):
            forger.sock.sendall(forged)
        good.send_ops(range(1000, 2000))
        with DaemonClient(f"127.0.0.1:{daemon.port}") as client:
            wait_for(lambda: stored_keys(client, "good") == [(0, s) for s in range(2000)], 30,
                     what="the good records, past the forged statistics")
            good.settle()
            status = wait_for(lambda: (s := client.status()).sidecars and
                              s.sidecars[0].stats.host and s, 20, what="the sidecar's stats")
            # its statistics name the ranks that registered, not the forged ones
            assert {(c.job, c.rank) for c in status.sidecars[0].stats.collectors} <= \
                {("good", 0), ("evil", 0)}
        assert car.metric("c4_sidecar_refused_frames_total", reason="bounds") == 3
    finally:
        forger.close()
        good.close()
        car.stop()
        daemon.stop(grace=1)


def _log_records(spill) -> list[tuple]:
    from collectors.sidecar.wal import Log

    log = Log(spill, max_bytes=1 << 30)
    return [(pos, kind, body) for seg in log.segments() for pos, kind, body in log.scan(seg)]


def test_a_corrupt_record_in_the_log_loses_only_itself(tmp_path):
    from collectors.sidecar.spill import KIND_CUT, KIND_FRAME, KIND_FRAME_Z, _cut_parts

    port = free_port()
    car = Car(tmp_path, port).start()  # no daemon yet: everything stays in the log
    rank = AckedRank(car.sock, "torn", 0, 1)
    daemon = None
    try:
        for i in range(20):
            rank.send_ops(range(i * 100, i * 100 + 100))
        rank.settle()

        def cut_frames() -> int:
            return sum(len(_cut_parts(body)[2]) for _, kind, body in _log_records(car.spill)
                       if kind == KIND_CUT)
        wait_for(lambda: cut_frames() == 20, 10, what="every frame batched (cut) in the log")
        car.kill()
        frames = [pos for pos, kind, _ in _log_records(car.spill)
                  if kind in (KIND_FRAME, KIND_FRAME_Z)]
        victim = frames[9]  # records 900..999
        with open(car.spill / f"{victim.segment:012d}.c4wal", "r+b") as fh:
            fh.seek(victim.offset + victim.length - 5)
            byte = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([byte[0] ^ 0xFF]))
        daemon = start_daemon(tmp_path, port)
        car.start()
        want = [(0, s) for s in range(2000) if not 900 <= s < 1000]
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: stored_keys(client, "torn") == want, 30,
                     what="every record but the corrupt frame's")
        wait_for(lambda: car.dropped() == {"corrupt": 100}, 10, what="the loss counted")
    finally:
        rank.close()
        car.stop()
        if daemon is not None:
            daemon.stop()


def test_an_older_sidecars_spill_is_delivered_after_the_upgrade(tmp_path):
    from collectors.sidecar.spill import LEGACY_SUFFIX

    port = free_port()
    spill = tmp_path / "sidecar-spill"
    spill.mkdir()
    reqs = [c4_pb2.IngestRequest(sidecar="old-1", seq=1, rank=rank_info("old", 0, 1, "n").rank)]
    reqs += [c4_pb2.IngestRequest(sidecar="old-1", seq=2 + i,
                                  ops=op_batch("old", 0, range(i * 50, i * 50 + 50)).ops)
             for i in range(10)]
    (spill / f"{1:012d}{LEGACY_SUFFIX}").write_bytes(b"".join(encode_frame(r) for r in reqs))
    daemon = start_daemon(tmp_path, port)
    car = Car(tmp_path, port, spill=spill).start()
    try:
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: stored_keys(client, "old") == [(0, s) for s in range(500)], 30,
                     what="the old spill's records")
        assert not list(spill.glob(f"*{LEGACY_SUFFIX}"))
    finally:
        car.stop()
        daemon.stop()


def test_the_size_of_a_body_is_read_before_parsing():
    from collectors.wire import peek_body

    forged = _forged_stats(1000)
    assert peek_body(forged.SerializeToString()) == ("stats", forged.stats.ByteSize())
    ops = op_batch("j", 0, range(10))
    ops.sidecar, ops.seq = "collector-1", 7  # fields before the body are skipped
    assert peek_body(ops.SerializeToString()) == ("ops", ops.ops.ByteSize())
    assert peek_body(b"") == ("", 0)
