"""The daemon's side: TLS credentials, the bind-address rule, and the token/role interceptor."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from c4.ratelog import RateLimitedLog
from c4.security.errors import SecurityError
from c4.security.roles import ROLES, required_permission
from c4.security.tokens import TokenTable

log = logging.getLogger(__name__)

CERT_HELP = ("give the daemon a certificate with --tls-cert FILE --tls-key FILE (C4_TLS_CERT, "
             "C4_TLS_KEY; add --tls-client-ca FILE to require client certificates), e.g. from "
             "your cluster CA or `openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem "
             "-out cert.pem -subj /CN=c4-daemon -addext subjectAltName=DNS:$(hostname)`")


@dataclass(frozen=True)
class ServerTls:
    cert: str | Path
    key: str | Path
    # set: every client must present a certificate this CA signed (mutual TLS)
    client_ca: str | Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        def read(what: str, path: str | Path) -> bytes:
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise SecurityError(f"cannot read the TLS {what} {path}: {exc.strerror}") \
                    from None

        ca = read("client CA", self.client_ca) if self.client_ca else None
        return grpc.ssl_server_credentials([(read("key", self.key), read("certificate",
                                                                          self.cert))],
                                           root_certificates=ca,
                                           require_client_auth=ca is not None)


def add_port(server: grpc.Server, listen: str, tls: ServerTls | None) -> int:
    """Bind ``server`` to ``listen`` (over TLS when given); the port bound, 0 when the address
    is in use or not this machine's."""
    try:
        if tls is not None:
            return server.add_secure_port(listen, tls.credentials())
        return server.add_insecure_port(listen)
    except RuntimeError:
        return 0


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_listen(listen: str, *, tls: bool, insecure: bool) -> None:
    """Refuse plaintext on anything but loopback unless the operator insists."""
    if tls or is_loopback(listen):
        return
    if insecure:
        log.warning("serving plaintext gRPC on %s (--insecure): telemetry and tokens cross the "
                    "network unencrypted", listen)
        return
    raise SecurityError(f"refusing to serve plaintext gRPC on the non-loopback address {listen}: "
                        f"{CERT_HELP}; or pass --insecure to accept an unencrypted daemon")


def check_metrics_listen(listen: str, *, tls: bool, insecure: bool) -> None:
    """``/metrics`` beyond loopback only over HTTPS (the daemon's certificate) or when the
    operator insists: its counters name jobs, hosts and sidecars."""
    host = listen.rpartition(":")[0] if ":" in listen else "127.0.0.1"
    if tls or is_loopback(f"{host or '127.0.0.1'}:0"):
        return
    if insecure:
        log.warning("serving /metrics over plaintext HTTP on %s (--metrics-insecure)", listen)
        return
    raise SecurityError(f"refusing to serve /metrics over plaintext HTTP on the non-loopback "
                        f"address {listen}: {CERT_HELP} (metrics are then HTTPS), or pass "
                        "--metrics-insecure to accept unencrypted metrics")


def bearer_token(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, token = str(value).partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def _denying_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
                     ) -> grpc.RpcMethodHandler:
    def deny(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    kinds = {(False, False): grpc.unary_unary_rpc_method_handler,
             (False, True): grpc.unary_stream_rpc_method_handler,
             (True, False): grpc.stream_unary_rpc_method_handler,
             (True, True): grpc.stream_stream_rpc_method_handler}
    make = kinds[(handler.request_streaming, handler.response_streaming)]
    return make(deny, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


class AuthInterceptor(grpc.ServerInterceptor):
    """Every call but health checks needs a known token whose role grants the method."""

    def __init__(self, tokens: TokenTable,
                 on_denied: Callable[[grpc.StatusCode], None] | None = None) -> None:
        self._tokens = tokens
        self._on_denied = on_denied
        self._rated = RateLimitedLog(log)

    def intercept_service(self, continuation: Callable[..., Any],
                          details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        need = required_permission(details.method)
        if handler is None or need is None:
            return handler
        token = bearer_token(details.invocation_metadata)
        if token is None:
            return self._deny(handler, grpc.StatusCode.UNAUTHENTICATED,
                              f"{details.method} needs a token: pass --token or set C4_TOKEN "
                              "(sent as `authorization: Bearer TOKEN`)")
        role = self._tokens.role(token)
        if role is None:
            return self._deny(handler, grpc.StatusCode.UNAUTHENTICATED,
                              "unknown token: check --token / C4_TOKEN against the daemon's "
                              "token file")
        if need not in ROLES[role]:
            allowed = sorted(r for r, perms in ROLES.items() if need in perms)
            return self._deny(handler, grpc.StatusCode.PERMISSION_DENIED,
                              f"a {role} token may not call {details.method}: it needs a token "
                              f"with role {' or '.join(allowed)}")
        return handler

    def _deny(self, handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
              ) -> grpc.RpcMethodHandler:
        if self._on_denied is not None:
            self._on_denied(code)
        self._rated.warning(code.name, "denied a call: %s", message)
        return _denying_handler(handler, code, message)
