"""``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--token-file`` (or ``C4_TOKEN``) for every
command that talks to the daemon, added by one decorator so each command's own code stays as
it is. Cheap to import (no grpc) so that ``c4 --help`` stays fast."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

OPTIONS = {
    "tls_ca": typer.Option("", "--tls-ca", envvar="C4_TLS_CA",
                           help="Reach the daemon over TLS, trusting this CA (PEM)."),
    "tls_cert": typer.Option("", "--tls-cert", envvar="C4_TLS_CERT",
                             help="Client certificate (PEM) for a mutual-TLS daemon."),
    "tls_key": typer.Option("", "--tls-key", envvar="C4_TLS_KEY",
                            help="Private key of --tls-cert."),
    # from the environment only: on the command line every local user could read it
    "token": typer.Option("", "--token", envvar="C4_TOKEN", hidden=True),
    "token_file": typer.Option("", "--token-file", envvar="C4_TOKEN_FILE",
                               help="File holding the bearer token for a daemon that checks "
                                    "tokens (read role to read, act role for recovery); or "
                                    "set C4_TOKEN."),
}


def with_client_security(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command the client security options; the ``DaemonClient``s it creates
    use them."""
    sig = inspect.signature(fn)
    taken = set(sig.parameters) & set(OPTIONS)
    if taken:
        raise TypeError(f"{fn.__name__} already has parameters {sorted(taken)}")

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        from c4.security.channel import ClientSecurity, use_security  # grpc: lazily
        from c4.security.secret import read_token

        given = {name: kwargs.pop(name, "") for name in OPTIONS}
        try:
            given["token"] = read_token(given["token"], given.pop("token_file"))
            security = ClientSecurity.from_env(**given)
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        with use_security(security):
            return fn(*args, **kwargs)

    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                               annotation=str) for name, option in OPTIONS.items()]
    params = list(sig.parameters.values())
    command.__signature__ = sig.replace(parameters=[  # type: ignore[attr-defined]
        *[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is
          inspect.Parameter.POSITIONAL_OR_KEYWORD else p for p in params], *extra])
    command.__annotations__ = {**getattr(fn, "__annotations__", {}),
                               **{name: str for name in OPTIONS}}
    return command
