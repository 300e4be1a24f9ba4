"""Asking RAS over a real TCP connection: the line protocol, the JSON report, the text report
from a server that refuses JSON, polling at an interval, and a server that is not there."""

from __future__ import annotations

import logging
import socket

import pytest

from diagnosis.nccl.ras_client import RasClient, RasError, RasPoller, ras_address
from tests.diagnosis.nccl.support import fixture
from tests.support.ras_server import RasServer


def test_a_report_gathered_for_the_whole_timeout_still_arrives():
    # RAS gathers from every process for up to TIMEOUT seconds, twice (its network, then the
    # communicators), before it answers: when a process is stopped, the report arrives only
    # after the timeout, and it is the report that matters most
    srv = RasServer(fixture("ncclras_status.json").read_text(), gather_s=1.5)
    try:
        body, fmt = RasClient(("127.0.0.1", srv.port), timeout_s=1).status()
        assert fmt == "json" and '"communicators"' in body
        assert "TIMEOUT 1" in srv.seen[0]
    finally:
        srv.close()


def test_address_spellings(monkeypatch):
    monkeypatch.delenv("NCCL_RAS_ADDR", raising=False)
    assert ras_address() == ("localhost", 28028)
    assert ras_address("10.0.0.2:29000") == ("10.0.0.2", 29000)
    assert ras_address("[::1]:29001") == ("::1", 29001)
    assert ras_address("node7") == ("node7", 28028)
    with pytest.raises(RasError, match="not host:port"):
        ras_address("node7:port")


def test_json_report_polled_at_its_interval():
    srv = RasServer(fixture("ncclras_status.json").read_text())
    now = [1000.0]
    poller = RasPoller(RasClient(("127.0.0.1", srv.port), timeout_s=5), interval_s=10,
                       clock=lambda: now[0])
    try:
        (snap,) = poller.poll()
        assert snap.format == "json" and snap.t_ns == 1000 * 10**9   # stamped when asked
        assert [(c.hash, c.size, len(c.ranks), len(c.missing)) for c in snap.comms] == [
            (0xAE94423CFBB2EF4A, 2, 1, 1)]
        assert srv.seen[0] == ["CLIENT PROTOCOL 2", "TIMEOUT 5", "SET FORMAT json", "STATUS"]
        now[0] += 5
        assert poller.poll() == []                                   # not due
        now[0] += 5
        assert len(poller.poll()) == 1 and poller.reports == 2 and len(srv.seen) == 2
    finally:
        srv.close()


def test_a_server_without_json_gives_the_text_report():
    srv = RasServer(fixture("ncclras_text_errors_incomplete.txt").read_text(), json_ok=False)
    client = RasClient(("127.0.0.1", srv.port), timeout_s=5)
    try:
        body, fmt = client.status()
        assert fmt == "text" and "INCOMPLETE" in body and not client.json_ok
        (snap,) = RasPoller(client, clock=lambda: 7.0).poll()
        assert snap.format == "text" and snap.t_ns == 7 * 10**9 and snap.timeouts == 2
        assert "SET FORMAT json" not in srv.seen[1]                  # not asked again
    finally:
        srv.close()


def test_no_server_is_one_warning_and_counted(caplog):
    port = socket.create_server(("127.0.0.1", 0))
    addr = port.getsockname()
    port.close()                                                     # nothing listens there
    poller = RasPoller(RasClient(addr, timeout_s=1), interval_s=0)
    with caplog.at_level(logging.WARNING):
        assert poller.poll() == [] and poller.poll() == []
    assert poller.failures == 2
    assert caplog.text.count("cannot ask NCCL RAS") == 1
