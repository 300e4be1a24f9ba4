"""A collector that cannot reach its sidecar says so within seconds, once, at WARNING, and
says again when it gets through (not only "N calls dropped" at exit)."""

from __future__ import annotations

import logging
import os
import socket
import time

from c4.proto import c4_pb2
from collectors.buffer import RecordBuffer
from collectors.config import CollectorConfig
from collectors.shipper import Shipper
from tests.support.services import wait_for


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "collectors.shipper" and r.levelno >= logging.WARNING]


def test_no_sidecar_is_said_within_seconds_and_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="collectors.shipper")
    path = tmp_path / "sidecar.sock"
    config = CollectorConfig(socket_path=path, job="lonely", attempt=0, host="node0",
                             flush_interval_s=0.02, reconnect_max_s=0.1,
                             unreachable_warn_s=0.5, buffer_rows=1000)
    shipper = Shipper(config, RecordBuffer(config.buffer_rows), c4_pb2.RankInfo(
        job="lonely", rank=3, world_size=4, host="node0", pid=os.getpid()))
    t0 = time.monotonic()
    shipper.start()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        said = wait_for(lambda: _warnings(caplog), 10, what="the warning")
        assert time.monotonic() - t0 < 5
        (msg,) = said
        assert "rank 3" in msg and str(path) in msg and "c4 sidecar" in msg
        time.sleep(0.5)
        assert len(_warnings(caplog)) == 1          # once, not at every retry
        server.bind(str(path))                      # the sidecar comes up
        server.listen(4)
        got = wait_for(lambda: [m for m in _warnings(caplog) if "reached" in m], 10,
                       what="the recovery message")
        assert str(path) in got[0]
    finally:
        shipper.stop(1.0)
        server.close()
