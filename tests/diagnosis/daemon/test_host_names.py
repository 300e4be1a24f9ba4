"""A node known by two names (the sidecar's --host, the ranks' own hostname) is said, once."""

from __future__ import annotations

import logging

import pytest

from c4.proto import c4_pb2
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.frames import rank_info
from tests.support.services import free_port

pytestmark = [pytest.mark.network]


def test_ranks_naming_another_host_than_their_sidecar_are_warned_about(caplog):
    caplog.set_level(logging.WARNING, logger="diagnosis.daemon.ingest")
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://"))
    d.start()
    try:
        with DaemonClient(f"127.0.0.1:{d.port}") as c:
            for seq, body in enumerate([
                    rank_info("vmjob", 0, 2, "vm"),
                    c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="node005")),
                    rank_info("vmjob", 1, 2, "vm"),
                    c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="node005"))], 1):
                body.sidecar, body.seq = "car-5", seq
                c.send(body)
        said = [r.getMessage() for r in caplog.records if "--host" in r.getMessage()]
        assert len(said) == 1 and "'node005'" in said[0] and "'vm'" in said[0]
        assert "C4_HOST" in said[0]
    finally:
        d.stop(grace=0.5)
