"""Where the daemon keeps telemetry and fault reports: one contract, two backends."""

from diagnosis.store.api import (
    ConnRows,
    GroupRecord,
    JobRecord,
    OpRows,
    RankRecord,
    Store,
    Write,
    open_store,
)

__all__ = [
    "ConnRows",
    "GroupRecord",
    "JobRecord",
    "OpRows",
    "RankRecord",
    "Store",
    "Write",
    "open_store",
]
