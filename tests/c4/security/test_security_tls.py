"""TLS on the daemon's gRPC port, with real certificates made by a throwaway CA in the test:
TLS works, plaintext is refused, mutual TLS requires a certificate from the right CA, and the
daemon refuses plaintext on a non-loopback address unless told --insecure."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from c4.security.channel import ClientSecurity
from c4.security.errors import SecurityError
from c4.security.server import is_loopback
from diagnosis.client import DaemonClient, DaemonError, DaemonUnavailable
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.pki import Pki, make_pki

pytestmark = [pytest.mark.network]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    for var in ("C4_TLS_CA", "C4_TLS_CERT", "C4_TLS_KEY", "C4_TOKEN", "C4_TLS_SERVER_NAME",
                "C4_INGEST_TOKEN", "C4_READ_TOKEN", "C4_ACT_TOKEN", "C4_ADMIN_TOKEN"):
        monkeypatch.delenv(var, raising=False)


def _daemon(**config) -> Daemon:
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", **config))
    d.start()
    return d


def _client(d: Daemon, **security) -> DaemonClient:
    return DaemonClient(f"127.0.0.1:{d.port}", timeout=3.0,
                        security=ClientSecurity(**security))


def test_tls_works_and_plaintext_is_refused(pki):
    d = _daemon(tls_cert=str(pki.server_cert), tls_key=str(pki.server_key))
    try:
        with _client(d, tls_ca=str(pki.ca)) as c:
            assert c.status().store == "memory"
        with _client(d) as plain, pytest.raises(DaemonUnavailable):
            plain.status()
        # a client that trusts only the system roots does not trust our CA
        with _client(d, tls_on=True) as untrusting, pytest.raises(DaemonUnavailable) as info:
            untrusting.status()
        assert "--tls-ca" in str(info.value)
    finally:
        d.stop(grace=1)


def test_tls_client_against_plaintext_daemon_is_refused(pki):
    d = _daemon()
    try:
        with _client(d, tls_ca=str(pki.ca)) as c, pytest.raises(DaemonUnavailable):
            c.status()
    finally:
        d.stop(grace=1)


def test_mutual_tls_requires_a_client_certificate_from_the_ca(pki):
    d = _daemon(tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                tls_client_ca=str(pki.ca))
    try:
        with _client(d, tls_ca=str(pki.ca), tls_cert=str(pki.client_cert),
                     tls_key=str(pki.client_key)) as c:
            assert c.jobs() == []
        with _client(d, tls_ca=str(pki.ca)) as no_cert, pytest.raises(DaemonError) as info:
            no_cert.status()
        assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED)
        with _client(d, tls_ca=str(pki.ca), tls_cert=str(pki.rogue_cert),
                     tls_key=str(pki.rogue_key)) as rogue, pytest.raises(DaemonError):
            rogue.status()
    finally:
        d.stop(grace=1)


def test_client_settings_come_from_the_environment(pki, monkeypatch):
    d = _daemon(tls_cert=str(pki.server_cert), tls_key=str(pki.server_key))
    try:
        monkeypatch.setenv("C4_TLS_CA", str(pki.ca))
        with DaemonClient(f"127.0.0.1:{d.port}", timeout=3.0) as c:
            assert c.security.tls and c.status().store == "memory"
    finally:
        d.stop(grace=1)


def test_client_certificate_without_key_is_a_clear_error(pki, monkeypatch):
    monkeypatch.setenv("C4_TLS_CERT", str(pki.client_cert))
    with pytest.raises(DaemonError, match="--tls-key"):
        DaemonClient("127.0.0.1:1")
    monkeypatch.setenv("C4_TLS_KEY", str(pki.client_key) + ".missing")
    with pytest.raises(DaemonError, match="cannot read"):
        DaemonClient("127.0.0.1:1")


def test_non_loopback_plaintext_needs_insecure(pki):
    with pytest.raises(SecurityError) as info:
        Daemon(DaemonConfig(listen="0.0.0.0:0", store="memory://"))
    assert "--tls-cert" in str(info.value) and "--insecure" in str(info.value)
    insecure = Daemon(DaemonConfig(listen="0.0.0.0:0", store="memory://", insecure=True))
    insecure.start()
    insecure.stop(grace=1)
    with_tls = Daemon(DaemonConfig(listen="0.0.0.0:0", store="memory://",
                                   tls_cert=str(pki.server_cert), tls_key=str(pki.server_key)))
    with_tls.start()
    try:
        with DaemonClient(f"127.0.0.1:{with_tls.port}", timeout=3.0,
                          security=ClientSecurity(tls_ca=str(pki.ca))) as c:
            assert c.status().store == "memory"
    finally:
        with_tls.stop(grace=1)


def test_daemon_command_refuses_plaintext_on_a_public_address():
    result = subprocess.run([sys.executable, "-m", "c4", "daemon", "--listen", "0.0.0.0:0",
                             "--store", "memory://"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--tls-cert" in result.stderr and "--insecure" in result.stderr


@pytest.mark.parametrize(("listen", "loopback"), [
    ("127.0.0.1:7444", True), ("127.3.0.1:1", True), ("localhost:7444", True),
    ("[::1]:7444", True), ("0.0.0.0:7444", False), ("10.1.2.3:7444", False),
    ("[::]:7444", False), ("daemon.example:7444", False)])
def test_loopback_addresses(listen, loopback):
    assert is_loopback(listen) is loopback
