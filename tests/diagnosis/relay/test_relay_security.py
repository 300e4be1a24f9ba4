"""A relay between sidecars and a daemon that both require TLS and tokens (a throwaway CA; a
real daemon and relay in this process): the relay admits only sidecars with an ingest token of
its own table, and reaches the daemon with its own certificate and token."""

from __future__ import annotations

import grpc
import pytest

from c4.proto import c4_pb2_grpc
from c4.security.channel import ClientSecurity, open_channel
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from diagnosis.relay.config import RelayConfig
from diagnosis.relay.server import Relay
from tests.support.frames import rank_info
from tests.support.pki import make_pki
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]

RELAY_INGEST, RELAY_READ = "relay-ingest-" + "r" * 20, "relay-read-" + "s" * 20
SIDECAR = "sidecar-ingest-" + "t" * 20


def _send(port: int, pki, token: str):
    """One RankInfo from a sidecar over TLS: its ack, or the error that ended the stream."""
    sec = ClientSecurity(tls_ca=str(pki.ca), token=token)
    req = rank_info("sec", 0, 1, "node0")
    req.sidecar, req.seq = "car", 1
    with open_channel(f"127.0.0.1:{port}", sec) as ch:
        call = c4_pb2_grpc.IngestStub(ch).Stream(iter([req]), timeout=20)
        try:
            return next(iter(call))
        except grpc.RpcError as exc:
            return exc


@pytest.fixture
def secured(tmp_path):
    pki = make_pki(tmp_path / "pki")
    daemon_tokens = tmp_path / "daemon-tokens"
    daemon_tokens.write_text(f"{RELAY_INGEST} ingest\n{RELAY_READ} read\n")
    relay_tokens = tmp_path / "relay-tokens"
    relay_tokens.write_text(f"{SIDECAR} ingest\n")
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                            tls_client_ca=str(pki.ca), tokens_file=str(daemon_tokens)))
    d.start()
    relays: list[Relay] = []

    def relay(token: str, ready: bool = True) -> Relay:
        r = Relay(RelayConfig(
            listen="127.0.0.1:0", daemon=f"127.0.0.1:{d.port}", upstreams=1, workers=8,
            max_streams=4, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
            tokens_file=str(relay_tokens), daemon_tls_ca=str(pki.ca),
            daemon_tls_cert=str(pki.client_cert), daemon_tls_key=str(pki.client_key),
            token=token))
        r.start()
        relays.append(r)
        if ready:
            wait_for(lambda: r.service.links[0].state()[0], 20, what="the relay's TLS stream")
        return r

    try:
        yield pki, relay
    finally:
        for r in relays:
            r.stop(grace_s=0.5)
        d.stop(grace=1)


def test_a_sidecar_with_the_relays_token_reaches_a_tls_daemon(secured):
    pki, relay = secured
    r = relay(RELAY_INGEST)
    ack = _send(r.port, pki, SIDECAR)
    assert not isinstance(ack, grpc.RpcError), ack
    assert (ack.seq, ack.code, ack.sidecar) == (1, 0, "car")   # stored by the daemon
    refused = _send(r.port, pki, "unknown-" + "u" * 20)
    assert isinstance(refused, grpc.RpcError)
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_relay_whose_token_may_not_ingest_says_why(secured):
    pki, relay = secured
    r = relay(RELAY_READ, ready=False)   # the daemon refuses its streams as they open
    wait_for(lambda: r.service.links[0].last_lost, 20, what="the daemon's refusal")
    ended = _send(r.port, pki, SIDECAR)
    assert isinstance(ended, grpc.RpcError)
    assert ended.code() == grpc.StatusCode.UNAVAILABLE
    assert "PERMISSION_DENIED" in ended.details()
