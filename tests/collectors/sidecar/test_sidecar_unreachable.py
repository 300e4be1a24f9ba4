"""A sidecar whose daemon is out of reach says so within seconds, once, and again when it gets
through (a real daemon started later, real gRPC)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from collectors.sidecar.outbox import Outbox
from collectors.sidecar.spill import Spill
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.services import free_port, wait_for

pytestmark = [pytest.mark.network]


def _said(caplog, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and words in r.getMessage()]


def test_no_daemon_is_said_within_seconds_then_its_arrival(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="collectors.sidecar.outbox")
    address = f"127.0.0.1:{free_port()}"
    spill = Spill(tmp_path / "spill", 1 << 26)
    outbox = Outbox("alone", spill, memory_max_bytes=1 << 26, max_inflight=8)
    stop = threading.Event()
    runner = threading.Thread(target=outbox.run, args=(address, stop),
                              kwargs={"reconnect_max_s": 0.2, "unreachable_warn_s": 0.5,
                                      "drain_on_stop": False}, daemon=True)
    t0 = time.monotonic()
    runner.start()
    daemon = None
    try:
        (msg,) = wait_for(lambda: _said(caplog, "cannot reach the daemon"), 10,
                          what="the warning")
        assert time.monotonic() - t0 < 5 and address in msg and "c4 daemon" in msg
        time.sleep(0.5)
        assert len(_said(caplog, "cannot reach the daemon")) == 1
        daemon = Daemon(DaemonConfig(listen=address, store="memory://"))
        daemon.start()
        wait_for(lambda: _said(caplog, "reached the daemon"), 15, what="the arrival")
    finally:
        stop.set()
        runner.join(5)
        if daemon is not None:
            daemon.stop(grace=0.5)
        spill.close()
