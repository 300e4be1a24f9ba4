"""The sidecar's exceptions: one root, messages that say what to do."""

from __future__ import annotations

from collectors.errors import CollectorError


class SidecarError(CollectorError):
    """Root of every error raised by the sidecar package."""


class SidecarConfigError(SidecarError, ValueError):
    """A sidecar setting (flag or ``C4_*`` variable) has a bad value."""


class LogError(SidecarError):
    """The write-ahead log cannot be written or read (the message names the file)."""


class LogFull(LogError):
    """No room in the write-ahead log: the disk is full or ``--spill-max-bytes`` is reached."""


class LogCorrupt(LogError):
    """A record of the write-ahead log fails its checksum or framing."""


class SocketSetupError(SidecarError):
    """The local socket cannot be created with the ownership and mode asked for."""
