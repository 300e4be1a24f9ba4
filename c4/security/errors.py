"""The transport security's error: settings that are unsafe or unusable (a certificate without
its key, an unreadable or short token, plaintext beyond loopback); the message says what to
give instead. A ``ValueError`` too, for the callers that take any bad value."""

from __future__ import annotations

from c4.errors import C4Error


class SecurityError(C4Error, ValueError):
    """The security settings are unsafe or unusable; the message says what to fix."""
