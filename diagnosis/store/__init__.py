"""Where the daemon keeps telemetry and fault reports: one contract, two backends."""

from diagnosis.store.api import (
    BATCH_KINDS,
    BatchRows,
    ConnRows,
    DetailRows,
    GroupRecord,
    HostRecord,
    JobRecord,
    OpRows,
    RankRecord,
    RemovedJob,
    Store,
    StoredBatch,
    StoredDetail,
    Write,
    open_store,
)

__all__ = [
    "BATCH_KINDS",
    "BatchRows",
    "ConnRows",
    "DetailRows",
    "GroupRecord",
    "HostRecord",
    "JobRecord",
    "OpRows",
    "RankRecord",
    "RemovedJob",
    "Store",
    "StoredBatch",
    "StoredDetail",
    "Write",
    "open_store",
]
