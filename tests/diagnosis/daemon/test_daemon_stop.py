"""A stopping daemon answers what its ingest streams brought and ends them: it does not hold
its shutdown (a restart, an upgrade) for the server's whole grace period because sidecars keep
their streams open."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from c4.proto import c4_pb2, c4_pb2_grpc
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.frames import group_info, op_batch, rank_info

pytestmark = [pytest.mark.network]
GRACE_S = 20.0


def _requests(q: queue.Queue) -> Iterator[c4_pb2.IngestRequest]:
    while (req := q.get()) is not None:
        yield req


def test_a_stopping_daemon_answers_its_streams_and_ends_them_before_its_grace():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://"))
    d.start()
    sent: queue.Queue = queue.Queue()
    with grpc.insecure_channel(f"127.0.0.1:{d.port}") as channel:
        replies = c4_pb2_grpc.IngestStub(channel).Stream(_requests(sent))
        for seq, body in enumerate([rank_info("st", 0, 1, "node0"), group_info("st", "0", [0]),
                                    op_batch("st", 0, range(10))], 1):
            body.sidecar, body.seq = "car", seq
            sent.put(body)
        acked = set()
        for ack in replies:
            if ack.seq:
                assert not ack.code, ack.error
                acked.add(ack.seq)
            if acked == {1, 2, 3}:
                break
        # the sidecar keeps its stream open (more records would follow) while the daemon stops
        t0 = time.monotonic()
        stopper = threading.Thread(target=d.stop, kwargs={"grace": GRACE_S})
        stopper.start()
        rest = list(replies)      # ends with OK: a stream cancelled at the grace's end raises
        stopper.join(GRACE_S + 10)
        took = time.monotonic() - t0
        sent.put(None)
    assert not stopper.is_alive()
    assert all(not a.code for a in rest if a.seq)
    assert took < GRACE_S / 2, f"the daemon held its stop {took:.1f} s for an answered stream"
