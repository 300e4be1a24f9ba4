"""The store contract shared by the SQLite (embedded default) and ClickHouse backends.

Writes are idempotent: every write carries the (sidecar, seq) of the ingest request it came from,
and a store applies each such pair at most once, even across daemon restarts, so a sidecar may
resend anything it has no acknowledgement for. The pairs are remembered with when they were
stored, so that the daemon's retention can forget old ones (``forget_applied``); every job
attempt remembers when it was last written to (``job_seen``), by the store's clock.

An op row is identified by (job, attempt, rank, pg, op, peer, seq): an open row
(``t_end_ns == -1``, the call had not completed when it was shipped) is replaced by the
completed row that follows it, never doubled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from c4.proto.codec import Columns
from c4.report import FaultReport


@dataclass(frozen=True)
class RankRecord:
    job: str
    attempt: int
    rank: int
    world_size: int
    host: str
    local_rank: int = -1
    pid: int = 0
    gpu: str = ""
    nic: str = ""
    backend: str = ""
    t_ns: int = 0
    cuda_device: str = ""   # its CUDA_VISIBLE_DEVICES entry (RankInfo.cuda_device)


@dataclass(frozen=True)
class HostRecord:
    """A host's internals as its sidecar discovered them (``HostTopology``): ``internals`` is
    the JSON of ``c4.topology.host_internals.HostInternals``."""

    host: str
    t_ns: int
    internals: str
    digest: str = ""
    sidecar: str = ""


@dataclass(frozen=True)
class GroupRecord:
    job: str
    attempt: int
    pg: str
    ranks: tuple[int, ...]
    desc: str = ""


@dataclass
class OpRows:
    """Op records of one job attempt; string columns index ``cols.strings``."""

    job: str
    attempt: int
    cols: Columns


@dataclass
class ConnRows:
    """Raw connection counter samples of one job attempt (c4.proto.codec.CONN_COLUMNS)."""

    job: str
    attempt: int
    cols: Columns


#: kinds of records a store keeps as whole batches (``BatchRows``)
BATCH_KINDS = ("progress", "linkstat", "port", "schedule", "health")


@dataclass
class BatchRows:
    """Records of one job attempt kept as the batch they came in (one stored row per batch,
    not per record): reduced telemetry (``progress``, ``linkstat``, ``port``), the job's
    sampling schedules (``schedule``) and node ``health`` samples and events. ``payload`` is
    the batch's protobuf encoding (``ProgressBatch``, ``LinkStatBatch``, ``PortBatch``,
    ``SampleSchedule``, ``HealthBatch``); ``cols`` the decoded records for the live view (None
    for a schedule and for health); ``t_lo``/``t_hi`` the times the records span."""

    job: str
    attempt: int
    kind: str
    count: int
    t_lo: int
    t_hi: int
    payload: bytes
    cols: Columns | None = None
    #: progress whose ranks' op rows hold completed calls only (``ProgressBatch.completed_only``)
    completed_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in BATCH_KINDS:
            raise ValueError(f"batch kind {self.kind!r} is not one of {', '.join(BATCH_KINDS)}")


@dataclass
class DetailRows:
    """Full records a node sent for a fault report (detail on demand): ``payload`` is the
    ``DetailBatch`` protobuf (its ops, status and range); ``count`` its op rows."""

    job: str
    attempt: int
    fault_id: str
    host: str
    count: int
    payload: bytes
    cols: Columns | None = None


Body = RankRecord | GroupRecord | OpRows | ConnRows | BatchRows | DetailRows


@dataclass(frozen=True)
class Write:
    """One ingest request's payload, identified by the sidecar that sent it and its number."""

    sidecar: str
    seq: int
    body: Body


@dataclass(frozen=True)
class StoredBatch:
    """A ``BatchRows`` as read back: its kind, the times it spans and its protobuf payload."""

    kind: str
    count: int
    t_lo: int
    t_hi: int
    payload: bytes


@dataclass(frozen=True)
class StoredDetail:
    """A ``DetailRows`` as read back."""

    fault_id: str
    job: str
    attempt: int
    host: str
    count: int
    payload: bytes


@dataclass(frozen=True)
class RemovedJob:
    """What ``Store.remove_job`` removed."""

    job: str
    attempts: int
    faults: int


@dataclass(frozen=True)
class JobRecord:
    job: str
    attempt: int
    world_size: int
    ranks_seen: int
    hosts: tuple[str, ...]
    ops: int
    first_ns: int
    last_ns: int


class Store(ABC):
    """Durable telemetry and fault reports. Implementations are safe to call from one writer
    thread and any number of reader threads."""

    name: str = "store"

    @abstractmethod
    def write(self, writes: Sequence[Write]) -> list[bool]:
        """Store every write not stored before; return, per write, whether it was a duplicate.

        Returns only once everything is durable: the daemon acknowledges after this call.
        Raises StoreError when the backend cannot be reached (nothing is acknowledged then).
        """

    @abstractmethod
    def jobs(self) -> list[JobRecord]:
        """Every job attempt with at least one registered rank, newest first."""

    @abstractmethod
    def job_seen(self) -> dict[str, int]:
        """Every job with a registered rank, and when anything of it was last stored (the
        store's clock, ns since the epoch; a cheap read, unlike ``jobs``)."""

    @abstractmethod
    def remove_job(self, job: str) -> RemovedJob:
        """Remove every attempt of a job: ranks, groups, records, batches, details and fault
        reports. Returns what was removed (0 attempts: nothing was stored)."""

    @abstractmethod
    def forget_applied(self, before_ns: int) -> int:
        """Forget the (sidecar, seq) of requests stored before ``before_ns`` (store clock):
        a resend of one of them is no longer recognised. Returns how many were forgotten."""

    @abstractmethod
    def ranks(self, job: str, attempt: int | None = None) -> list[RankRecord]:
        """The registered ranks of a job (latest attempt when ``attempt`` is None)."""

    @abstractmethod
    def groups(self, job: str, attempt: int | None = None) -> list[GroupRecord]:
        """The communicators of a job (latest attempt when ``attempt`` is None)."""

    @abstractmethod
    def ops(self, job: str, attempt: int | None = None, *, rank: int | None = None,
            pg: str | None = None, limit: int = 0) -> Columns:
        """Op records ordered by (t_enter_ns, rank), one row per call; ``limit`` 0: all."""

    @abstractmethod
    def count_ops(self, job: str, attempt: int | None = None) -> int:
        """How many distinct calls are stored for the job."""

    @abstractmethod
    def conns(self, job: str, attempt: int | None = None) -> Columns:
        """Connection samples ordered by time."""

    @abstractmethod
    def batches(self, job: str, attempt: int | None = None, *,
                kinds: Sequence[str] | None = None) -> list[StoredBatch]:
        """The batches of a job attempt (latest when ``attempt`` is None) of the given kinds
        (all when None), by ``t_lo`` then arrival."""

    @abstractmethod
    def details(self, job: str, fault_id: str | None = None) -> list[StoredDetail]:
        """The detail records stored for a job's faults (one fault's with ``fault_id``)."""

    @abstractmethod
    def put_fault(self, report: FaultReport) -> None:
        """Insert or replace a report by ``report.id`` (the higher ``revision`` wins)."""

    @abstractmethod
    def get_fault(self, fault_id: str) -> FaultReport | None: ...

    @abstractmethod
    def list_faults(self, job: str | None = None, *, open_only: bool = False,
                    limit: int = 0) -> list[FaultReport]:
        """Newest first."""

    @abstractmethod
    def count_faults(self, job: str | None = None, *, open_only: bool = False) -> int:
        """How many reports ``list_faults`` with the same arguments would return, counted by
        the backend without reading a report (for ``c4 status``)."""

    def put_host(self, record: HostRecord) -> None:
        """Keep a host's discovered internals (the newest ``t_ns`` wins). This default keeps
        them in memory only: a backend that does not override it forgets them when the daemon
        restarts, until each sidecar discovers a change or restarts."""
        hosts = self.__dict__.setdefault("_hosts_in_memory", {})
        old = hosts.get(record.host)
        if old is None or record.t_ns >= old.t_ns:
            hosts[record.host] = record

    def hosts(self) -> list[HostRecord]:
        """Every host's newest internals, by host."""
        return sorted(self.__dict__.get("_hosts_in_memory", {}).values(), key=lambda r: r.host)

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        """Release connections; writes already returned are durable."""

