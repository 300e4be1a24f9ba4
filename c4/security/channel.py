"""Clients' side: a gRPC channel with TLS (optionally a client certificate) and a bearer token.

Every flag has an environment fallback (``C4_TLS_CA``, ``C4_TLS_CERT``, ``C4_TLS_KEY``,
``C4_TOKEN``, ``C4_TLS_SERVER_NAME``), so the CLI, the sidecar and the recovery controller all
pick up the same settings."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from c4.security.errors import SecurityError

log = logging.getLogger(__name__)

ENV = {"tls_ca": "C4_TLS_CA", "tls_cert": "C4_TLS_CERT", "tls_key": "C4_TLS_KEY",
       "token": "C4_TOKEN", "server_name": "C4_TLS_SERVER_NAME"}


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches the daemon. No TLS file set: plaintext (fine on loopback)."""

    tls_ca: str = ""       # CA that signed the daemon's certificate ("" with TLS: system roots)
    tls_cert: str = ""     # this client's certificate, for mutual TLS
    tls_key: str = ""
    token: str = ""        # sent as `authorization: Bearer TOKEN`
    server_name: str = ""  # the name the daemon's certificate carries, when it differs
    tls_on: bool = False   # TLS with system roots even without --tls-ca

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SecurityError("a client certificate needs both --tls-cert and --tls-key")

    @property
    def tls(self) -> bool:
        return self.tls_on or bool(self.tls_ca or self.tls_cert)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> ClientSecurity:
        """Settings given explicitly win; the rest come from ``C4_*`` variables."""
        env = os.environ if env is None else env
        values = {field: env.get(var, "") for field, var in ENV.items()}
        values.update({k: v for k, v in given.items() if v not in (None, "")})
        # the fields are strings but for the tls_on flag, so the keyword values mix types
        fields: dict[str, Any] = {k: str(v) if k != "tls_on" else bool(v)
                                  for k, v in values.items()}
        return cls(**fields)

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise SecurityError(f"cannot read {path}: {exc.strerror}") from None

        return grpc.ssl_channel_credentials(root_certificates=read(self.tls_ca),
                                            private_key=read(self.tls_key),
                                            certificate_chain=read(self.tls_cert))


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call (works on plaintext loopback channels too, unlike call
    credentials, which gRPC only sends over TLS)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), self._header]
        return _Details(details.method, details.timeout, metadata, details.credentials,
                        getattr(details, "wait_for_ready", None),
                        getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


@dataclass(frozen=True)
class _Details(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: Sequence[tuple[str, str]] | None
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: Any


_current: ContextVar[ClientSecurity | None] = ContextVar("c4_client_security", default=None)


def default_security() -> ClientSecurity:
    """What a command's ``--tls-*``/``--token`` flags set (see ``use_security``), else the
    ``C4_*`` environment."""
    return _current.get() or ClientSecurity.from_env()


@contextlib.contextmanager
def use_security(security: ClientSecurity) -> Iterator[ClientSecurity]:
    """Clients made inside this block default to ``security``."""
    token = _current.set(security)
    try:
        yield security
    finally:
        _current.reset(token)


def open_channel(address: str, security: ClientSecurity | None = None,
                 options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A channel to ``address`` with the given (or ``C4_*`` environment) security."""
    sec = security if security is not None else default_security()
    opts = list(options)
    if sec.server_name:
        opts.append(("grpc.ssl_target_name_override", sec.server_name))
    if sec.tls:
        channel = grpc.secure_channel(address, sec.credentials(), options=opts)
    else:
        channel = grpc.insecure_channel(address, options=opts)
    if sec.token:
        if not sec.tls:
            _warn_plaintext_token(address)
        channel = grpc.intercept_channel(channel, _Bearer(sec.token))
    return channel


_warned: set[str] = set()


def _warn_plaintext_token(address: str) -> None:
    """A bearer token in the clear beyond this machine can be read off the network: say so,
    once per address (the call goes ahead: the operator may run it inside a trusted net)."""
    from c4.security.server import is_loopback

    if is_loopback(address) or address in _warned:
        return
    _warned.add(address)
    log.warning("sending a bearer token to %s over plaintext gRPC: anyone on the network path "
                "can read it and use it. Reach the daemon over TLS (--tls-ca / C4_TLS_CA)",
                address)
