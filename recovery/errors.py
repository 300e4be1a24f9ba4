"""The recovery package's exceptions: one root, messages that say what to do."""

from __future__ import annotations

from c4.errors import C4Error


class RecoveryError(C4Error):
    """Root of every error raised by the recovery package."""


class ConfigError(RecoveryError, ValueError):
    """A recovery setting (flag or ``C4_*`` variable) has a bad value; the message names it."""


class TransitionError(RecoveryError):
    """A recovery was asked to move between two states the state machine does not connect."""


class IsolationError(RecoveryError):
    """An isolation backend could not isolate, release or restart."""


class LaunchError(RecoveryError):
    """The supervisor cannot start or restart the job."""


class CheckpointError(RecoveryError):
    """No usable checkpoint, or one that cannot be written."""
