"""The one exception of the link-counter samplers."""

from __future__ import annotations

from collectors.errors import CollectorError


class LinkStatsError(CollectorError):
    """The kernel refused or garbled a link-counter query; the message says what to check."""
