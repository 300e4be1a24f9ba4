"""Killing the sidecar (SIGKILL) loses nothing and stores nothing twice: what it took is in its
write-ahead log and a restarted sidecar sends it again under the same (sidecar, seq), which the
daemon recognizes; what it had not yet taken, the ranks send again, and the sidecar recognizes
frames it already had. Real daemon (SQLite store), real sidecar processes, real sockets."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from c4.proto import c4_pb2
from collectors.buffer import RecordBuffer
from collectors.config import CollectorConfig
from collectors.shipper import Shipper
from diagnosis.client import DaemonClient
from tests.collectors.sidecar.harness import AckedRank, Car, stored_keys
from tests.support.services import free_port, start_daemon, wait_for

pytestmark = [pytest.mark.network]


def _received(car: Car) -> float:
    return car.metric("c4_sidecar_received_records_total")


def test_sigkill_mid_stream_after_a_daemon_freeze_loses_and_duplicates_nothing(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car = Car(tmp_path, port).start()
    ranks = [AckedRank(car.sock, "crash", r, 2) for r in range(2)]
    per_rank, frame = 20_000, 100

    def drive(rank: AckedRank) -> None:
        for seq in range(0, per_rank, frame):
            rank.send_ops(range(seq, seq + frame))
            time.sleep(0.004)

    threads = [threading.Thread(target=drive, args=(r,), daemon=True) for r in ranks]
    try:
        for t in threads:
            t.start()
        wait_for(lambda: _received(car) >= 6_000, 30, what="records flowing")
        # the daemon stops acknowledging: the sidecar holds what it took, unacknowledged
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        start = _received(car)
        wait_for(lambda: _received(car) >= start + 6_000, 30, what="records taken meanwhile")
        car.kill()  # mid-stream: frames in its log, in its socket buffers, in flight
        os.kill(daemon.proc.pid, signal.SIGCONT)
        car.start()  # same socket, same log
        for t in threads:
            t.join(60)
        for r in ranks:
            r.settle()
        assert any(r.reconnects for r in ranks), "the ranks saw the sidecar go"
        want = sorted((r.rank, s) for r in ranks for s in r.sent)
        assert len(want) == 2 * per_rank
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: stored_keys(client, "crash") == want, 60,
                     what="every record stored after the restart")
            # each record was stored once: a replayed request is recognized, not stored again
            assert client.status().records_ingested == len(want)
        assert car.metric("c4_sidecar_recovered_requests_total") > 0, \
            "the restarted sidecar found unacknowledged requests in its log"
        assert car.dropped() == {}
    finally:
        for r in ranks:
            r.close()
        car.stop()
        daemon.stop()


def test_a_real_collector_resends_what_a_killed_sidecar_had_not_taken(tmp_path):
    port = free_port()
    daemon = start_daemon(tmp_path, port)
    car = Car(tmp_path, port).start()
    config = CollectorConfig(socket_path=car.sock, job="shipped", attempt=0, host="node0",
                             flush_interval_s=0.02, reconnect_max_s=0.2, buffer_rows=1 << 20)
    buffer = RecordBuffer(config.buffer_rows)
    buffer.groups.append(c4_pb2.GroupInfo(pg="0", ranks=[0]))
    pg, op, dtype = (buffer.strings.intern(s) for s in ("0", "all_reduce", "float32"))
    shipper = Shipper(config, buffer, c4_pb2.RankInfo(job="shipped", rank=0, world_size=1,
                                                      host="node0", pid=os.getpid()))
    total = 30_000

    def record() -> None:
        t = time.time_ns()
        for seq in range(total):
            buffer.append((pg, seq, op, 4096, dtype, t + seq, -1, t + seq + 10, 0, -1))
            if seq % 200 == 199:
                time.sleep(0.005)

    recorder = threading.Thread(target=record, daemon=True)
    try:
        shipper.start()
        recorder.start()
        wait_for(lambda: _received(car) >= 8_000, 30, what="records flowing")
        car.kill()
        car.start()
        recorder.join(60)
        with DaemonClient(f"127.0.0.1:{port}") as client:
            wait_for(lambda: stored_keys(client, "shipped") == [(0, s) for s in range(total)],
                     60, what="every record stored after the restart")
            assert client.status().records_ingested == total
        assert shipper.dropped() == 0
        assert car.dropped() == {}
    finally:
        shipper.stop(2)
        car.stop()
        daemon.stop()
