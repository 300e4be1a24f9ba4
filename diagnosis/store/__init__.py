"""Where the daemon keeps telemetry and fault reports: one contract (``api``), backends
opened by URL scheme (``registry``)."""

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
)
from diagnosis.store.registry import open_store, store_registry

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
    "store_registry",
]
