"""Who a caller really is, for per-sender limits: never what the request says about itself.

A sidecar names itself in every request (``IngestRequest.sidecar``), but a broken or hostile
sender can change that name at will, so limits keyed by it are limits of nothing. The key here
is what the connection proves: the client certificate's name under mutual TLS, else the bearer
token when the daemon checks tokens (only then is a token proven: without a token table any
value passes), plus in both cases the peer's network address (one token or one certificate is
often shared by every node of a cluster, and each node must keep its own limit). Without
either, the peer address alone. The port is left out: reconnecting must not reset a limit.
"""

from __future__ import annotations

import hashlib
from typing import Any

from c4.security.server import bearer_token


def peer_host(peer: str) -> str:
    """``ipv4:10.0.0.5:40312`` -> ``10.0.0.5``, ``ipv6:[::1]:40312`` -> ``::1``; anything
    else (a Unix socket) as it is."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] or rest
        return host.strip("[]").split("%", 1)[0]
    return peer or "unknown peer"


def _cert_name(auth: dict[str, list[bytes]]) -> str | None:
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        values = auth.get(key)
        if values:
            return values[0].decode(errors="replace")
    return None


def sender_identity(context: Any, *, tokens_checked: bool) -> str:
    """A stable, unforgeable key for the caller of ``context`` (a grpc.ServicerContext)."""
    host = peer_host(context.peer() or "")
    name = _cert_name(context.auth_context() or {})
    if name is not None:
        return f"certificate {name} at {host}"
    if tokens_checked:
        token = bearer_token(context.invocation_metadata())
        if token:
            # a digest prefix names the token in logs and messages without revealing it
            return f"token {hashlib.sha256(token.encode()).hexdigest()[:12]} at {host}"
    return host
