"""Per-sender rate limits are keyed by who the sender proves to be (its address, its checked
token, its client certificate), not by the sidecar id it declares: a sender over its limit is
refused with RESOURCE_EXHAUSTED and a message naming it, another sender is unaffected, and
inventing new sidecar ids neither resets the limit nor grows the daemon's tables."""

from __future__ import annotations

import grpc
import pytest

from c4.proto import c4_pb2
from c4.security.channel import ClientSecurity
from c4.security.identity import peer_host
from c4.security.tokens import TokenTable
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.pki import make_pki

pytestmark = [pytest.mark.network]
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
RATE = 5  # requests per second per sender, bursts of 10


def _stats(sidecar: str, seq: int) -> c4_pb2.IngestRequest:
    # statistics are acknowledged without touching the store: the cheapest request to repeat
    return c4_pb2.IngestRequest(sidecar=sidecar, seq=seq, stats=c4_pb2.SidecarStats(host="h"))


def _flood(client: DaemonClient, n: int = 40) -> list[str]:
    """Send ``n`` requests, each under a new sidecar id; the refusal messages."""
    refused = []
    for seq in range(1, n + 1):
        try:
            client.send(_stats(f"forged-{seq}", seq))
        except DaemonError as exc:
            assert exc.code == EXHAUSTED, exc
            refused.append(str(exc))
    return refused


def _served(client: DaemonClient, sidecar: str = "polite") -> bool:
    return not client.send(_stats(sidecar, 1)).code


def test_peer_host_drops_the_port() -> None:
    assert peer_host("ipv4:10.0.0.5:40312") == "10.0.0.5"
    assert peer_host("ipv6:[::1]:40312") == "::1"
    assert peer_host("ipv6:[fe80::1%eth0]:1") == "fe80::1"
    assert peer_host("unix:/run/c4.sock") == "unix:/run/c4.sock"


def test_without_security_the_peer_address_is_the_sender() -> None:
    # "localhost" binds both loopback families: two senders with two real addresses
    d = Daemon(DaemonConfig(listen="localhost:0", store="memory://",
                            max_requests_per_second=RATE))
    d.start()
    d.ingest._max_sidecars = 16
    hog = DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())
    other = DaemonClient(f"[::1]:{d.port}", timeout=5.0, security=ClientSecurity())
    try:
        refused = _flood(hog)
        assert len(refused) >= 20, "a new sidecar id per request must not reset the limit"
        assert "sender 127.0.0.1" in refused[0] and "retry later" in refused[0]
        assert f"{RATE:g} requests/s per sender" in refused[0]
        assert _served(other), "another address has its own limit"
        with pytest.raises(DaemonError) as info:  # the hog is still over, under any name
            hog.send(_stats("polite", 2))
        assert info.value.code == EXHAUSTED
        assert len(d.ingest.sidecars) <= 16, "forged ids must not grow the sidecar table"
        assert d.ingest.rejected_by_code["RESOURCE_EXHAUSTED"] == len(refused) + 1
    finally:
        hog.close()
        other.close()
        d.stop(grace=1)


def test_with_tokens_each_checked_token_is_a_sender() -> None:
    tokens = {"a" * 24: "ingest", "b" * 24: "ingest"}
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            max_requests_per_second=RATE), tokens=TokenTable(tokens))
    d.start()
    hog, other = (DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0,
                               security=ClientSecurity(token=t)) for t in tokens)
    try:
        refused = _flood(hog)
        assert len(refused) >= 20
        assert "sender token " in refused[0] and " at 127.0.0.1" in refused[0]
        assert "a" * 24 not in refused[0], "the message must not reveal the token"
        assert _served(other), "the other token at the same address has its own limit"
    finally:
        hog.close()
        other.close()
        d.stop(grace=1)


def test_with_mutual_tls_each_certificate_is_a_sender(tmp_path) -> None:
    pki = make_pki(tmp_path, clients=("node-a", "node-b"))
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            max_requests_per_second=RATE, tls_cert=str(pki.server_cert),
                            tls_key=str(pki.server_key), tls_client_ca=str(pki.ca)),
               tokens=TokenTable())
    d.start()
    hog, other = (DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0,
                               security=ClientSecurity(tls_ca=str(pki.ca), tls_cert=str(cert),
                                                       tls_key=str(key)))
                  for cert, key in (pki.clients["node-a"], pki.clients["node-b"]))
    try:
        refused = _flood(hog)
        assert len(refused) >= 20
        assert "sender certificate node-a at 127.0.0.1" in refused[0]
        assert _served(other), "node-b's certificate has its own limit"
    finally:
        hog.close()
        other.close()
        d.stop(grace=1)
