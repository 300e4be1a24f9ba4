"""PyTorch Flight Recorder dumps: read them safely and find who hung, mismatched or failed."""

from __future__ import annotations

from diagnosis.flight_recorder.analyzer import analyze, analyze_dumps
from diagnosis.flight_recorder.dumps import FrEntry, RankDump, load_dump, load_dumps

__all__ = ["FrEntry", "RankDump", "analyze", "analyze_dumps", "load_dump", "load_dumps"]
