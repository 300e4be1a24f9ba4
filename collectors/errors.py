"""The collector's exceptions: one root, messages that say what to do.

Nothing here is ever raised into a training step: the hooks swallow their own failures (and log
them) so that telemetry can never break the job. These errors come from explicit calls only:
``install()`` with a bad configuration, ``c4 run`` with a bad command line.
"""

from __future__ import annotations

from c4.errors import C4Error


class CollectorError(C4Error):
    """Root of every error raised by the collectors package."""


class ConfigError(CollectorError, ValueError):
    """A collector setting (argument or ``C4_*`` environment variable) has a bad value."""


class TorchUnavailableError(CollectorError):
    """``install()`` was called in a process that cannot import torch.distributed."""
