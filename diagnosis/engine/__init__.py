"""Detectors that turn collective telemetry into fault reports (shared specs section 3).

``Engine`` takes rank and group registrations, op records (``c4.proto.codec.Columns`` with
``OP_COLUMNS``) and connection records (``ConnRecords``), and files ``FaultReport``s as the data's
clock advances. Thresholds live in ``EngineConfig``.
"""

from __future__ import annotations

from diagnosis.engine.config import EngineConfig
from diagnosis.engine.engine import Engine
from diagnosis.engine.records import ConnRecords

__all__ = ["ConnRecords", "Engine", "EngineConfig"]
