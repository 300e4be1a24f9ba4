"""Telemetry traces (shared specs section 2): a streaming JSON Lines reader and a writer."""

from __future__ import annotations

from diagnosis.trace.reader import End, GroupInfo, Meta, RankInfo, read_trace
from diagnosis.trace.writer import TraceWriter

__all__ = ["End", "GroupInfo", "Meta", "RankInfo", "TraceWriter", "read_trace"]
