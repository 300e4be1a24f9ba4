"""The daemon under abuse (issue 16, items 8 and 9): fault watches capped while ingest and
status keep working; bytes that are no request answered INVALID_ARGUMENT saying so; refusals
logged at a bounded rate; /metrics beyond loopback refused without TLS; a bearer token sent
in the clear beyond loopback warned about; `c4 status` answering with the store down."""

from __future__ import annotations

import logging
import os

import grpc
import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto import c4_pb2_grpc
from c4.security.channel import ClientSecurity, open_channel
from c4.security.errors import SecurityError
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.clickhouse import running_clickhouse
from tests.support.frames import op_batch, rank_info
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]


def _daemon(**config) -> tuple[Daemon, DaemonClient]:
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", **{"store": "memory://", **config}))
    d.start()
    return d, DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())


def _numbered(req, seq: int, sidecar: str = "s"):
    req.sidecar, req.seq = sidecar, seq
    return req


def test_watches_are_capped_and_ingest_and_status_keep_working():
    d, c = _daemon(workers=16, max_streams=4, max_watches=3, max_requests_per_second=0)
    channel = open_channel(f"127.0.0.1:{d.port}", ClientSecurity())
    stub = c4_pb2_grpc.FaultsStub(channel)
    from c4.proto import c4_pb2

    held, refused = [], []
    try:
        for _ in range(3):
            call = stub.Watch(c4_pb2.WatchFaultsRequest())
            held.append(call)
        wait_for(lambda: d.status().watches == 3, 10, what="three watches open")
        for _ in range(20):        # a flood beyond the cap: each refused at once
            try:
                next(stub.Watch(c4_pb2.WatchFaultsRequest(), timeout=5))
            except grpc.RpcError as exc:
                refused.append(exc)
        assert len(refused) == 20
        assert all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for e in refused)
        assert "--max-watches" in refused[0].details()
        # ingest and status have threads of their own
        assert not c.send(_numbered(rank_info("j", 0, 1, "n0"), 1)).code
        assert not c.send(_numbered(op_batch("j", 0, range(10)), 2)).code
        s = c.status()
        assert (s.watches, s.jobs) == (3, 1)
        for call in held:
            call.cancel()
        wait_for(lambda: d.status().watches == 0, 10, what="the watches released")
    finally:
        channel.close()
        c.close()
        d.stop(grace=1)


def test_bytes_that_are_no_request_get_invalid_argument(caplog):
    d, c = _daemon()
    channel = grpc.insecure_channel(f"127.0.0.1:{d.port}")
    junk = os.urandom(64) + b"\xff" * 16     # a truncated varint at the end: never parses
    try:
        send = channel.unary_unary("/c4.v1.Ingest/Send")
        with pytest.raises(grpc.RpcError) as info:
            send(junk, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid c4.v1.IngestRequest protobuf" in info.value.details()
        stream = channel.stream_stream("/c4.v1.Ingest/Stream")
        with pytest.raises(grpc.RpcError) as info:
            list(stream(iter([junk]), timeout=5))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "request 1 on this stream" in info.value.details()
        query = channel.unary_unary("/c4.v1.Query/Status")
        with pytest.raises(grpc.RpcError) as info:
            query(junk, timeout=5)
        assert "c4.v1.StatusRequest" in info.value.details()
        assert c.status().version        # the daemon is fine
    finally:
        channel.close()
        c.close()
        d.stop(grace=1)


def test_refusals_are_counted_every_one_and_logged_at_a_rate(caplog):
    d, c = _daemon(max_requests_per_second=0)
    try:
        with caplog.at_level(logging.WARNING, logger="diagnosis.daemon.ingest"):
            for seq in range(1, 301):
                with pytest.raises(DaemonError):
                    c.send(_numbered(op_batch("nobody", 0, range(4)), seq))
        assert d.status().batches_rejected == 300
        lines = [r for r in caplog.records if r.name == "diagnosis.daemon.ingest"]
        assert 1 <= len(lines) <= 5, len(lines)
    finally:
        c.close()
        d.stop(grace=1)


def test_metrics_beyond_loopback_need_tls_or_the_insecure_flag(caplog):
    with pytest.raises(SecurityError) as info:
        DaemonConfig(listen="127.0.0.1:0", metrics_listen="0.0.0.0:0")
    assert "--metrics-insecure" in str(info.value) and "--tls-cert" in str(info.value)
    DaemonConfig(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0")
    with caplog.at_level(logging.WARNING):
        DaemonConfig(listen="127.0.0.1:0", metrics_listen="0.0.0.0:0", metrics_insecure=True)
    assert any("plaintext" in r.getMessage() for r in caplog.records)
    out = CliRunner().invoke(build_app(), ["daemon", "--listen", "127.0.0.1:0", "--store",
                                           "memory://", "--metrics", "0.0.0.0:0"])
    assert out.exit_code == 2 and "--metrics-insecure" in out.output


def test_a_token_in_the_clear_beyond_loopback_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="c4.security.channel"):
        open_channel("127.0.0.1:7444", ClientSecurity(token="t")).close()
        assert not caplog.records
        open_channel("192.0.2.1:7444", ClientSecurity(token="t")).close()
        open_channel("192.0.2.1:7444", ClientSecurity(token="t")).close()
        open_channel("192.0.2.2:7444", ClientSecurity()).close()        # no token: nothing
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "192.0.2.1:7444" in warned[0] and "TLS" in warned[0]


def test_status_answers_with_the_store_down(tmp_path):
    server_gen = running_clickhouse()
    server = next(server_gen)
    d, c = _daemon(store=server.url("c4_down"), max_requests_per_second=0)
    try:
        assert not c.send(_numbered(rank_info("j", 0, 1, "n0"), 1)).code
        server.stop(kill=True)
        wait_for(lambda: d.status().store_error, 20, what="the store error in the status")
        out = CliRunner().invoke(build_app(), ["status", "--daemon", f"127.0.0.1:{d.port}"])
        assert out.exit_code == 0, out.output
        assert "store unavailable" in out.output and "1 job(s)" in out.output
    finally:
        c.close()
        d.stop(grace=1)
        server_gen.close()

