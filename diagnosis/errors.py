"""The diagnosis package's exceptions: one root, messages that say what to do."""

from __future__ import annotations

from c4.errors import C4Error


class DiagnosisError(C4Error):
    """Root of every error raised by the diagnosis package."""


class StoreError(DiagnosisError):
    """The store cannot be reached or refused an operation."""


class ConfigError(DiagnosisError, ValueError):
    """A setting (a daemon flag or ``C4_*`` variable, an engine field) has a bad value; the
    message names it."""
