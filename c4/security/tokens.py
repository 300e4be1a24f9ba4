"""Bearer tokens and their roles: a token file (``TOKEN ROLE`` per line) plus ``C4_*`` env.

Tokens are kept only as SHA-256 digests, so looking one up takes the same time whatever its
prefix, and a memory dump shows no usable token."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from c4.errors import FormatError
from c4.security.errors import SecurityError
from c4.security.roles import ROLES, check_role

# Environment fallbacks: one token per role, for small setups without a token file.
ENV_TOKENS = {"C4_INGEST_TOKEN": "ingest", "C4_READ_TOKEN": "read", "C4_ACT_TOKEN": "act",
              "C4_ADMIN_TOKEN": "admin"}
MIN_TOKEN_CHARS = 16


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenTable:
    """Which role each known token has. Empty: the daemon does not check tokens."""

    def __init__(self, tokens: Mapping[str, str] | None = None) -> None:
        self._roles: dict[bytes, str] = {}
        for token, role in (tokens or {}).items():
            self.add(token, role)

    def add(self, token: str, role: str) -> None:
        check_role(role)
        if len(token) < MIN_TOKEN_CHARS:
            raise SecurityError(f"a {role} token is shorter than {MIN_TOKEN_CHARS} characters: "
                             "generate one with `openssl rand -hex 24`")
        self._roles[_digest(token)] = role

    def role(self, token: str) -> str | None:
        return self._roles.get(_digest(token))

    def __len__(self) -> int:
        return len(self._roles)

    def __bool__(self) -> bool:
        return bool(self._roles)

    @classmethod
    def load(cls, path: str | Path | None = None,
             env: Mapping[str, str] | None = None) -> TokenTable:
        """Tokens from ``path`` (if given) and from ``C4_INGEST_TOKEN`` etc. in ``env``."""
        table = cls()
        if path:
            table._read(Path(path))
        env = os.environ if env is None else env
        for var, role in ENV_TOKENS.items():
            if env.get(var):
                try:
                    table.add(env[var], role)
                except ValueError as exc:
                    raise SecurityError(f"{var}: {exc}") from None
        return table

    def _read(self, path: Path) -> None:
        try:
            text = path.read_text()
        except OSError as exc:
            raise FormatError(f"cannot read the token file: {exc.strerror}",
                              source=str(path)) from None
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise FormatError("expected `TOKEN ROLE`", source=str(path), line=n)
            token, role = parts
            if role not in ROLES:
                raise FormatError(f"unknown role {role!r}: use one of {', '.join(sorted(ROLES))}",
                                  source=str(path), line=n, field="role")
            try:
                self.add(token, role)
            except ValueError as exc:
                raise FormatError(str(exc), source=str(path), line=n, field="token") from None
