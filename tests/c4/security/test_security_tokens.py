"""Bearer tokens and roles on a real daemon over TLS: missing or unknown tokens are
UNAUTHENTICATED, the wrong role is PERMISSION_DENIED, each with a message that says what to do;
a future action RPC needs the act role."""

from __future__ import annotations

import contextlib
import threading
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from c4.errors import FormatError
from c4.proto import c4_pb2
from c4.security.channel import ClientSecurity, open_channel
from c4.security.roles import Permission, required_permission
from c4.security.server import AuthInterceptor
from c4.security.tokens import TokenTable
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.frames import op_batch, rank_info
from tests.support.pki import make_pki
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]

TOKENS = {"ingest": "i" * 24, "read": "r" * 24, "act": "a" * 24, "admin": "d" * 24}
DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTH = grpc.StatusCode.UNAUTHENTICATED


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    token_file = tmp_path_factory.mktemp("tokens") / "tokens"
    token_file.write_text("# token role\n" + "".join(f"{t} {r}  # the {r} role\n"
                                                      for r, t in TOKENS.items()))
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                            tokens_file=str(token_file)), tokens=None)
    d.start()
    yield d, pki
    d.stop(grace=1)


def _client(daemon, token: str = "") -> DaemonClient:
    d, pki = daemon
    return DaemonClient(f"127.0.0.1:{d.port}", timeout=3.0,
                        security=ClientSecurity(tls_ca=str(pki.ca), token=token))


def _req(seq: int, body: c4_pb2.IngestRequest, sidecar: str = "tok-sidecar"
         ) -> c4_pb2.IngestRequest:
    body.sidecar, body.seq = sidecar, seq
    return body


def _code(fn) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(DaemonError) as info:
        fn()
    return info.value.code, str(info.value)


def test_status_says_that_ingest_needs_a_token(daemon):
    # what c4 recover checks before it acts on the reports
    with _client(daemon, TOKENS["read"]) as c:
        assert c.status().ingest_authenticated


def test_missing_or_unknown_token_is_unauthenticated(daemon):
    with _client(daemon) as c:
        code, msg = _code(c.status)
        assert code == UNAUTH and "--token" in msg and "C4_TOKEN" in msg
    with _client(daemon, "x" * 24) as c:
        code, msg = _code(c.jobs)
        assert code == UNAUTH and "unknown token" in msg


def test_ingest_role_may_only_send(daemon):
    with _client(daemon, TOKENS["ingest"]) as c:
        assert not c.send(_req(1, rank_info("tok", 0, 1, "node0"))).code
        assert not c.send(_req(2, op_batch("tok", 0, range(5)))).code
        code, msg = _code(c.status)
        assert code == DENIED and "ingest token" in msg and "read" in msg
        assert _code(c.faults)[0] == DENIED
        assert _code(lambda: list(c.watch()))[0] == DENIED


def test_read_role_may_read_and_watch_but_not_send(daemon):
    with _client(daemon, TOKENS["read"]) as c:
        c.status()
        c.faults()
        c.jobs()
        code, msg = _code(lambda: c.send(_req(10, op_batch("tok", 0, range(5)))))
        assert code == DENIED and "ingest" in msg
        # the live fault stream needs read: it opens and the daemon holds a subscriber
        d, _ = daemon
        before = len(d.hub._subscribers)
        def watch() -> None:
            with contextlib.suppress(DaemonError):  # ends when the client closes
                list(c.watch(include_open=True))

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        wait_for(lambda: len(d.hub._subscribers) > before, 10,
                 what="a read token to open the live fault stream")


def test_act_and_admin_roles(daemon):
    with _client(daemon, TOKENS["act"]) as c:
        c.status()
        assert _code(lambda: c.send(_req(20, op_batch("tok", 0, range(5)))))[0] == DENIED
    with _client(daemon, TOKENS["admin"]) as c:
        c.status()
        assert not c.send(_req(21, op_batch("tok", 0, range(5, 10)))).code


def test_health_needs_no_token(daemon):
    d, pki = daemon
    channel = open_channel(f"127.0.0.1:{d.port}", ClientSecurity(tls_ca=str(pki.ca)))
    try:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                          timeout=3)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()


def _denied(d) -> float:
    return sum(s.value for fam in d.registry.collect() if fam.name == "c4_daemon_auth_denied"
               for s in fam.samples if s.name.endswith("_total"))


def test_denials_are_counted_in_metrics(daemon):
    d, _ = daemon
    before = _denied(d)
    with _client(daemon) as c:
        _code(c.status)
    assert _denied(d) == before + 1


def test_a_future_action_rpc_needs_the_act_role():
    """No action RPC exists yet; any method of a c4 service not in the table needs act."""
    assert required_permission("/c4.v1.Recovery/Isolate") is Permission.ACT
    assert required_permission("/c4.v1.Query/Status") is Permission.READ
    assert required_permission("/c4.v1.Ingest/Stream") is Permission.INGEST
    assert required_permission("/grpc.health.v1.Health/Check") is None

    def isolate(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"isolated " + request

    handler = grpc.method_handlers_generic_handler(
        "c4.v1.Recovery", {"Isolate": grpc.unary_unary_rpc_method_handler(isolate)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                         interceptors=[AuthInterceptor(TokenTable(
                             {TOKENS["read"]: "read", TOKENS["act"]: "act"}))])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        def call(token: str) -> bytes:
            ch = open_channel(f"127.0.0.1:{port}", ClientSecurity(token=token))
            try:
                return ch.unary_unary("/c4.v1.Recovery/Isolate")(b"node7", timeout=3)
            finally:
                ch.close()

        assert call(TOKENS["act"]) == b"isolated node7"
        with pytest.raises(grpc.RpcError) as info:
            call(TOKENS["read"])
        assert info.value.code() == DENIED and "act" in info.value.details()
    finally:
        server.stop(0)


def test_token_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "tokens"
    bad.write_text("# ok\n" + "t" * 24 + " read\n" + "u" * 24 + " superuser\n")
    with pytest.raises(FormatError) as info:
        TokenTable.load(bad, env={})
    assert ":3" in str(info.value) and "superuser" in str(info.value)
    bad.write_text("short read\n")
    with pytest.raises(FormatError, match="openssl rand"):
        TokenTable.load(bad, env={})
    with pytest.raises(FormatError, match="cannot read"):
        TokenTable.load(tmp_path / "missing", env={})


def test_env_tokens_fall_back(tmp_path):
    table = TokenTable.load(None, env={"C4_INGEST_TOKEN": "e" * 20, "C4_ACT_TOKEN": "f" * 20})
    assert len(table) == 2
    assert table.role("e" * 20) == "ingest" and table.role("f" * 20) == "act"
    assert table.role("g" * 20) is None
    assert not TokenTable.load(None, env={})


def test_job_topology_needs_the_read_role(daemon):
    with _client(daemon, TOKENS["ingest"]) as c:
        assert not c.send(_req(50, rank_info("tok-topo", 0, 1, "node0"))).code
        code, _ = _code(lambda: c.job_topology("tok-topo"))
        assert code == DENIED
    with _client(daemon, TOKENS["read"]) as c:
        obj = wait_for(lambda: _quiet(lambda: c.job_topology("tok-topo")), 10,
                       what="the job's topology")
        assert obj["hosts"] == ["node0"] and obj["discovered"] == []


def _quiet(fn):
    try:
        return fn()
    except DaemonError:
        return None


def test_bad_client_settings_are_the_security_error():
    """Every refusal of the security settings is one SecurityError (a C4Error, and a
    ValueError for callers that take any bad value), with the message that says what to fix."""
    from c4.errors import C4Error
    from c4.security.errors import SecurityError
    from c4.security.roles import check_role
    from c4.security.secret import read_token

    with pytest.raises(SecurityError, match="needs both --tls-cert and --tls-key") as err:
        ClientSecurity.from_env({}, tls_cert="cert.pem")
    assert isinstance(err.value, C4Error) and isinstance(err.value, ValueError)
    with pytest.raises(SecurityError, match="cannot read the token file"):
        read_token("", "/nonexistent/token")
    with pytest.raises(SecurityError, match="unknown role"):
        check_role("operator")
