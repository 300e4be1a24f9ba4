from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_OK: _ClassVar[OpStatus]
    OP_TIMEOUT: _ClassVar[OpStatus]
    OP_ERROR: _ClassVar[OpStatus]
OP_OK: OpStatus
OP_TIMEOUT: OpStatus
OP_ERROR: OpStatus

class OpBatch(_message.Message):
    __slots__ = ("job", "attempt", "count", "strings", "rank", "pg", "seq", "op", "nbytes", "dtype", "t_enter_ns", "t_start_ns", "t_end_ns", "status", "peer", "error_text")
    class ErrorTextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PG_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    T_ENTER_NS_FIELD_NUMBER: _ClassVar[int]
    T_START_NS_FIELD_NUMBER: _ClassVar[int]
    T_END_NS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    count: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    rank: bytes
    pg: bytes
    seq: bytes
    op: bytes
    nbytes: bytes
    dtype: bytes
    t_enter_ns: bytes
    t_start_ns: bytes
    t_end_ns: bytes
    status: bytes
    peer: bytes
    error_text: _containers.ScalarMap[int, str]
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., count: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., rank: _Optional[bytes] = ..., pg: _Optional[bytes] = ..., seq: _Optional[bytes] = ..., op: _Optional[bytes] = ..., nbytes: _Optional[bytes] = ..., dtype: _Optional[bytes] = ..., t_enter_ns: _Optional[bytes] = ..., t_start_ns: _Optional[bytes] = ..., t_end_ns: _Optional[bytes] = ..., status: _Optional[bytes] = ..., peer: _Optional[bytes] = ..., error_text: _Optional[_Mapping[int, str]] = ...) -> None: ...

class ConnSampleBatch(_message.Message):
    __slots__ = ("job", "attempt", "count", "strings", "rank", "local", "remote", "t_ns", "bytes_acked", "bytes_received", "rtt_us", "delivery_rate", "retrans", "busy_us")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACKED_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    RTT_US_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_RATE_FIELD_NUMBER: _ClassVar[int]
    RETRANS_FIELD_NUMBER: _ClassVar[int]
    BUSY_US_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    count: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    rank: bytes
    local: bytes
    remote: bytes
    t_ns: bytes
    bytes_acked: bytes
    bytes_received: bytes
    rtt_us: bytes
    delivery_rate: bytes
    retrans: bytes
    busy_us: bytes
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., count: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., rank: _Optional[bytes] = ..., local: _Optional[bytes] = ..., remote: _Optional[bytes] = ..., t_ns: _Optional[bytes] = ..., bytes_acked: _Optional[bytes] = ..., bytes_received: _Optional[bytes] = ..., rtt_us: _Optional[bytes] = ..., delivery_rate: _Optional[bytes] = ..., retrans: _Optional[bytes] = ..., busy_us: _Optional[bytes] = ...) -> None: ...

class ProgressBatch(_message.Message):
    __slots__ = ("job", "attempt", "count", "strings", "rank", "pg", "op", "peer", "t_ns", "entered", "completed", "completed_only")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PG_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    ENTERED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_ONLY_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    count: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    rank: bytes
    pg: bytes
    op: bytes
    peer: bytes
    t_ns: bytes
    entered: bytes
    completed: bytes
    completed_only: bool
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., count: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., rank: _Optional[bytes] = ..., pg: _Optional[bytes] = ..., op: _Optional[bytes] = ..., peer: _Optional[bytes] = ..., t_ns: _Optional[bytes] = ..., entered: _Optional[bytes] = ..., completed: _Optional[bytes] = ..., completed_only: _Optional[bool] = ...) -> None: ...

class LinkStatBatch(_message.Message):
    __slots__ = ("job", "attempt", "count", "strings", "src", "dst", "local", "remote", "pg", "t_ns", "window_ns", "transfers", "nbytes", "busy_ns", "max_ns", "open", "open_since_ns", "retrans")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    PG_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NS_FIELD_NUMBER: _ClassVar[int]
    TRANSFERS_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    BUSY_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    OPEN_SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    RETRANS_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    count: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    src: bytes
    dst: bytes
    local: bytes
    remote: bytes
    pg: bytes
    t_ns: bytes
    window_ns: bytes
    transfers: bytes
    nbytes: bytes
    busy_ns: bytes
    max_ns: bytes
    open: bytes
    open_since_ns: bytes
    retrans: bytes
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., count: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., src: _Optional[bytes] = ..., dst: _Optional[bytes] = ..., local: _Optional[bytes] = ..., remote: _Optional[bytes] = ..., pg: _Optional[bytes] = ..., t_ns: _Optional[bytes] = ..., window_ns: _Optional[bytes] = ..., transfers: _Optional[bytes] = ..., nbytes: _Optional[bytes] = ..., busy_ns: _Optional[bytes] = ..., max_ns: _Optional[bytes] = ..., open: _Optional[bytes] = ..., open_since_ns: _Optional[bytes] = ..., retrans: _Optional[bytes] = ...) -> None: ...

class PortBatch(_message.Message):
    __slots__ = ("job", "attempt", "count", "strings", "host", "nic", "t_ns", "up", "link_downed", "symbol_errors", "rcv_errors", "xmit_discards", "retrans", "rx_bytes", "tx_bytes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    LINK_DOWNED_FIELD_NUMBER: _ClassVar[int]
    SYMBOL_ERRORS_FIELD_NUMBER: _ClassVar[int]
    RCV_ERRORS_FIELD_NUMBER: _ClassVar[int]
    XMIT_DISCARDS_FIELD_NUMBER: _ClassVar[int]
    RETRANS_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    count: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    host: bytes
    nic: bytes
    t_ns: bytes
    up: bytes
    link_downed: bytes
    symbol_errors: bytes
    rcv_errors: bytes
    xmit_discards: bytes
    retrans: bytes
    rx_bytes: bytes
    tx_bytes: bytes
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., count: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., host: _Optional[bytes] = ..., nic: _Optional[bytes] = ..., t_ns: _Optional[bytes] = ..., up: _Optional[bytes] = ..., link_downed: _Optional[bytes] = ..., symbol_errors: _Optional[bytes] = ..., rcv_errors: _Optional[bytes] = ..., xmit_discards: _Optional[bytes] = ..., retrans: _Optional[bytes] = ..., rx_bytes: _Optional[bytes] = ..., tx_bytes: _Optional[bytes] = ...) -> None: ...

class HealthSample(_message.Message):
    __slots__ = ("host", "component", "t_ns", "values", "reasons", "event", "code", "text")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    HOST_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    host: str
    component: str
    t_ns: int
    values: _containers.ScalarMap[str, float]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    event: str
    code: int
    text: str
    def __init__(self, host: _Optional[str] = ..., component: _Optional[str] = ..., t_ns: _Optional[int] = ..., values: _Optional[_Mapping[str, float]] = ..., reasons: _Optional[_Iterable[str]] = ..., event: _Optional[str] = ..., code: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class HealthBatch(_message.Message):
    __slots__ = ("job", "attempt", "samples")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    samples: _containers.RepeatedCompositeFieldContainer[HealthSample]
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[HealthSample, _Mapping]]] = ...) -> None: ...

class DetailBatch(_message.Message):
    __slots__ = ("job", "attempt", "fault_id", "request", "host", "status", "from_ns", "to_ns", "held_from_ns", "ops", "truncated")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        COMPLETE: _ClassVar[DetailBatch.Status]
        PARTIAL: _ClassVar[DetailBatch.Status]
        GONE: _ClassVar[DetailBatch.Status]
    COMPLETE: DetailBatch.Status
    PARTIAL: DetailBatch.Status
    GONE: DetailBatch.Status
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FAULT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FROM_NS_FIELD_NUMBER: _ClassVar[int]
    TO_NS_FIELD_NUMBER: _ClassVar[int]
    HELD_FROM_NS_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    fault_id: str
    request: int
    host: str
    status: DetailBatch.Status
    from_ns: int
    to_ns: int
    held_from_ns: int
    ops: OpBatch
    truncated: bool
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., fault_id: _Optional[str] = ..., request: _Optional[int] = ..., host: _Optional[str] = ..., status: _Optional[_Union[DetailBatch.Status, str]] = ..., from_ns: _Optional[int] = ..., to_ns: _Optional[int] = ..., held_from_ns: _Optional[int] = ..., ops: _Optional[_Union[OpBatch, _Mapping]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class RankInfo(_message.Message):
    __slots__ = ("job", "attempt", "rank", "world_size", "host", "local_rank", "pid", "gpu", "nic", "backend", "t_ns", "cuda_device")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    CUDA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    rank: int
    world_size: int
    host: str
    local_rank: int
    pid: int
    gpu: str
    nic: str
    backend: str
    t_ns: int
    cuda_device: str
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., host: _Optional[str] = ..., local_rank: _Optional[int] = ..., pid: _Optional[int] = ..., gpu: _Optional[str] = ..., nic: _Optional[str] = ..., backend: _Optional[str] = ..., t_ns: _Optional[int] = ..., cuda_device: _Optional[str] = ...) -> None: ...

class GroupInfo(_message.Message):
    __slots__ = ("job", "attempt", "pg", "ranks", "desc", "size", "positions")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PG_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    pg: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    desc: str
    size: int
    positions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., pg: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., desc: _Optional[str] = ..., size: _Optional[int] = ..., positions: _Optional[_Iterable[int]] = ...) -> None: ...

class CollectorStats(_message.Message):
    __slots__ = ("job", "rank", "recorded", "dropped", "shipped", "t_ns", "attempt", "leaving")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    SHIPPED_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    recorded: int
    dropped: int
    shipped: int
    t_ns: int
    attempt: int
    leaving: bool
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., recorded: _Optional[int] = ..., dropped: _Optional[int] = ..., shipped: _Optional[int] = ..., t_ns: _Optional[int] = ..., attempt: _Optional[int] = ..., leaving: _Optional[bool] = ...) -> None: ...

class CollectorColumns(_message.Message):
    __slots__ = ("job", "attempt", "count", "rank", "recorded", "dropped", "shipped", "t_ns", "leaving")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    SHIPPED_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    count: int
    rank: bytes
    recorded: bytes
    dropped: bytes
    shipped: bytes
    t_ns: bytes
    leaving: bytes
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., count: _Optional[int] = ..., rank: _Optional[bytes] = ..., recorded: _Optional[bytes] = ..., dropped: _Optional[bytes] = ..., shipped: _Optional[bytes] = ..., t_ns: _Optional[bytes] = ..., leaving: _Optional[bytes] = ...) -> None: ...

class SidecarStats(_message.Message):
    __slots__ = ("host", "received", "shipped", "spilled", "dropped", "rejected", "spill_bytes", "collectors", "records_out", "bytes_out", "late_steps", "detail_refused", "detail_records", "collector_columns")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    SHIPPED_FIELD_NUMBER: _ClassVar[int]
    SPILLED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    SPILL_BYTES_FIELD_NUMBER: _ClassVar[int]
    COLLECTORS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    LATE_STEPS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_REFUSED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    host: str
    received: int
    shipped: int
    spilled: int
    dropped: int
    rejected: int
    spill_bytes: int
    collectors: _containers.RepeatedCompositeFieldContainer[CollectorStats]
    records_out: int
    bytes_out: int
    late_steps: int
    detail_refused: int
    detail_records: int
    collector_columns: _containers.RepeatedCompositeFieldContainer[CollectorColumns]
    def __init__(self, host: _Optional[str] = ..., received: _Optional[int] = ..., shipped: _Optional[int] = ..., spilled: _Optional[int] = ..., dropped: _Optional[int] = ..., rejected: _Optional[int] = ..., spill_bytes: _Optional[int] = ..., collectors: _Optional[_Iterable[_Union[CollectorStats, _Mapping]]] = ..., records_out: _Optional[int] = ..., bytes_out: _Optional[int] = ..., late_steps: _Optional[int] = ..., detail_refused: _Optional[int] = ..., detail_records: _Optional[int] = ..., collector_columns: _Optional[_Iterable[_Union[CollectorColumns, _Mapping]]] = ...) -> None: ...

class IngestRequest(_message.Message):
    __slots__ = ("sidecar", "seq", "rank", "group", "ops", "conns", "stats", "progress", "linkstats", "ports", "detail", "inspection", "health", "host_topology")
    SIDECAR_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    CONNS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LINKSTATS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    INSPECTION_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    HOST_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    sidecar: str
    seq: int
    rank: RankInfo
    group: GroupInfo
    ops: OpBatch
    conns: ConnSampleBatch
    stats: SidecarStats
    progress: ProgressBatch
    linkstats: LinkStatBatch
    ports: PortBatch
    detail: DetailBatch
    inspection: InspectResult
    health: HealthBatch
    host_topology: HostTopology
    def __init__(self, sidecar: _Optional[str] = ..., seq: _Optional[int] = ..., rank: _Optional[_Union[RankInfo, _Mapping]] = ..., group: _Optional[_Union[GroupInfo, _Mapping]] = ..., ops: _Optional[_Union[OpBatch, _Mapping]] = ..., conns: _Optional[_Union[ConnSampleBatch, _Mapping]] = ..., stats: _Optional[_Union[SidecarStats, _Mapping]] = ..., progress: _Optional[_Union[ProgressBatch, _Mapping]] = ..., linkstats: _Optional[_Union[LinkStatBatch, _Mapping]] = ..., ports: _Optional[_Union[PortBatch, _Mapping]] = ..., detail: _Optional[_Union[DetailBatch, _Mapping]] = ..., inspection: _Optional[_Union[InspectResult, _Mapping]] = ..., health: _Optional[_Union[HealthBatch, _Mapping]] = ..., host_topology: _Optional[_Union[HostTopology, _Mapping]] = ...) -> None: ...

class SampleStep(_message.Message):
    __slots__ = ("pg", "from_seq", "sample")
    PG_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    pg: str
    from_seq: int
    sample: int
    def __init__(self, pg: _Optional[str] = ..., from_seq: _Optional[int] = ..., sample: _Optional[int] = ...) -> None: ...

class SampleSchedule(_message.Message):
    __slots__ = ("job", "attempt", "version", "steps", "window_ns", "window_from_ns", "default_sample")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FROM_NS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    version: int
    steps: _containers.RepeatedCompositeFieldContainer[SampleStep]
    window_ns: int
    window_from_ns: int
    default_sample: int
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., version: _Optional[int] = ..., steps: _Optional[_Iterable[_Union[SampleStep, _Mapping]]] = ..., window_ns: _Optional[int] = ..., window_from_ns: _Optional[int] = ..., default_sample: _Optional[int] = ...) -> None: ...

class DetailRequest(_message.Message):
    __slots__ = ("job", "attempt", "fault_id", "request", "from_ns", "to_ns", "ranks", "max_records")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FAULT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    FROM_NS_FIELD_NUMBER: _ClassVar[int]
    TO_NS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    fault_id: str
    request: int
    from_ns: int
    to_ns: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    max_records: int
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., fault_id: _Optional[str] = ..., request: _Optional[int] = ..., from_ns: _Optional[int] = ..., to_ns: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., max_records: _Optional[int] = ...) -> None: ...

class InspectRequest(_message.Message):
    __slots__ = ("request", "job", "attempt", "fault_id", "rank", "host", "backend")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FAULT_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    request: int
    job: str
    attempt: int
    fault_id: str
    rank: int
    host: str
    backend: str
    def __init__(self, request: _Optional[int] = ..., job: _Optional[str] = ..., attempt: _Optional[int] = ..., fault_id: _Optional[str] = ..., rank: _Optional[int] = ..., host: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...

class InspectResult(_message.Message):
    __slots__ = ("request", "fault_id", "host", "rank", "facts_json")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    FAULT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    FACTS_JSON_FIELD_NUMBER: _ClassVar[int]
    request: int
    fault_id: str
    host: str
    rank: int
    facts_json: str
    def __init__(self, request: _Optional[int] = ..., fault_id: _Optional[str] = ..., host: _Optional[str] = ..., rank: _Optional[int] = ..., facts_json: _Optional[str] = ...) -> None: ...

class Control(_message.Message):
    __slots__ = ("schedule", "detail", "inspect", "group")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    INSPECT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    schedule: SampleSchedule
    detail: DetailRequest
    inspect: InspectRequest
    group: GroupInfo
    def __init__(self, schedule: _Optional[_Union[SampleSchedule, _Mapping]] = ..., detail: _Optional[_Union[DetailRequest, _Mapping]] = ..., inspect: _Optional[_Union[InspectRequest, _Mapping]] = ..., group: _Optional[_Union[GroupInfo, _Mapping]] = ...) -> None: ...

class IngestAck(_message.Message):
    __slots__ = ("seq", "code", "error", "duplicate", "sidecar", "control", "parked_job")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    SIDECAR_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    PARKED_JOB_FIELD_NUMBER: _ClassVar[int]
    seq: int
    code: int
    error: str
    duplicate: bool
    sidecar: str
    control: Control
    parked_job: str
    def __init__(self, seq: _Optional[int] = ..., code: _Optional[int] = ..., error: _Optional[str] = ..., duplicate: _Optional[bool] = ..., sidecar: _Optional[str] = ..., control: _Optional[_Union[Control, _Mapping]] = ..., parked_job: _Optional[str] = ...) -> None: ...

class Suspect(_message.Message):
    __slots__ = ("type", "id", "score", "rank")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    score: float
    rank: int
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., score: _Optional[float] = ..., rank: _Optional[int] = ...) -> None: ...

class FaultReport(_message.Message):
    __slots__ = ("id", "job", "kind", "suspects", "first_seen_ns", "last_seen_ns", "pg", "seq", "summary", "evidence_json", "state", "revision", "causes_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUSPECTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    PG_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CAUSES_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    job: str
    kind: str
    suspects: _containers.RepeatedCompositeFieldContainer[Suspect]
    first_seen_ns: int
    last_seen_ns: int
    pg: str
    seq: int
    summary: str
    evidence_json: str
    state: str
    revision: int
    causes_json: str
    def __init__(self, id: _Optional[str] = ..., job: _Optional[str] = ..., kind: _Optional[str] = ..., suspects: _Optional[_Iterable[_Union[Suspect, _Mapping]]] = ..., first_seen_ns: _Optional[int] = ..., last_seen_ns: _Optional[int] = ..., pg: _Optional[str] = ..., seq: _Optional[int] = ..., summary: _Optional[str] = ..., evidence_json: _Optional[str] = ..., state: _Optional[str] = ..., revision: _Optional[int] = ..., causes_json: _Optional[str] = ...) -> None: ...

class ListFaultsRequest(_message.Message):
    __slots__ = ("job", "open_only", "limit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    OPEN_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    open_only: bool
    limit: int
    def __init__(self, job: _Optional[str] = ..., open_only: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ListFaultsResponse(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[FaultReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[FaultReport, _Mapping]]] = ...) -> None: ...

class GetFaultRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class WatchFaultsRequest(_message.Message):
    __slots__ = ("job", "include_open")
    JOB_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_OPEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    include_open: bool
    def __init__(self, job: _Optional[str] = ..., include_open: _Optional[bool] = ...) -> None: ...

class FaultActionRequest(_message.Message):
    __slots__ = ("id", "by", "note")
    ID_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    id: str
    by: str
    note: str
    def __init__(self, id: _Optional[str] = ..., by: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job", "attempt", "world_size", "ranks_seen", "hosts", "ops", "first_ns", "last_ns", "open_faults", "state", "ended_ns", "end_reason")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANKS_SEEN_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    FIRST_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_NS_FIELD_NUMBER: _ClassVar[int]
    OPEN_FAULTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ENDED_NS_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    world_size: int
    ranks_seen: int
    hosts: _containers.RepeatedScalarFieldContainer[str]
    ops: int
    first_ns: int
    last_ns: int
    open_faults: int
    state: str
    ended_ns: int
    end_reason: str
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., world_size: _Optional[int] = ..., ranks_seen: _Optional[int] = ..., hosts: _Optional[_Iterable[str]] = ..., ops: _Optional[int] = ..., first_ns: _Optional[int] = ..., last_ns: _Optional[int] = ..., open_faults: _Optional[int] = ..., state: _Optional[str] = ..., ended_ns: _Optional[int] = ..., end_reason: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ...) -> None: ...

class OpsRequest(_message.Message):
    __slots__ = ("job", "rank", "pg", "limit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PG_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    pg: str
    limit: int
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., pg: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GroupsRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("pg", "ranks", "desc")
    PG_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    pg: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    desc: str
    def __init__(self, pg: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., desc: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SidecarSeen(_message.Message):
    __slots__ = ("sidecar", "host", "last_seen_ns", "stats")
    SIDECAR_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    sidecar: str
    host: str
    last_seen_ns: int
    stats: SidecarStats
    def __init__(self, sidecar: _Optional[str] = ..., host: _Optional[str] = ..., last_seen_ns: _Optional[int] = ..., stats: _Optional[_Union[SidecarStats, _Mapping]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "store", "started_ns", "records_ingested", "records_per_second", "batches_rejected", "duplicates", "sidecars", "jobs", "open_faults", "store_error", "live_jobs", "job_problems", "watches", "ingest_streams", "ingest_authenticated")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    STARTED_NS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_INGESTED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BATCHES_REJECTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    SIDECARS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    OPEN_FAULTS_FIELD_NUMBER: _ClassVar[int]
    STORE_ERROR_FIELD_NUMBER: _ClassVar[int]
    LIVE_JOBS_FIELD_NUMBER: _ClassVar[int]
    JOB_PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    WATCHES_FIELD_NUMBER: _ClassVar[int]
    INGEST_STREAMS_FIELD_NUMBER: _ClassVar[int]
    INGEST_AUTHENTICATED_FIELD_NUMBER: _ClassVar[int]
    version: str
    store: str
    started_ns: int
    records_ingested: int
    records_per_second: float
    batches_rejected: int
    duplicates: int
    sidecars: _containers.RepeatedCompositeFieldContainer[SidecarSeen]
    jobs: int
    open_faults: int
    store_error: str
    live_jobs: int
    job_problems: int
    watches: int
    ingest_streams: int
    ingest_authenticated: bool
    def __init__(self, version: _Optional[str] = ..., store: _Optional[str] = ..., started_ns: _Optional[int] = ..., records_ingested: _Optional[int] = ..., records_per_second: _Optional[float] = ..., batches_rejected: _Optional[int] = ..., duplicates: _Optional[int] = ..., sidecars: _Optional[_Iterable[_Union[SidecarSeen, _Mapping]]] = ..., jobs: _Optional[int] = ..., open_faults: _Optional[int] = ..., store_error: _Optional[str] = ..., live_jobs: _Optional[int] = ..., job_problems: _Optional[int] = ..., watches: _Optional[int] = ..., ingest_streams: _Optional[int] = ..., ingest_authenticated: _Optional[bool] = ...) -> None: ...

class RemoveJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class RemoveJobResponse(_message.Message):
    __slots__ = ("job", "attempts", "faults")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempts: int
    faults: int
    def __init__(self, job: _Optional[str] = ..., attempts: _Optional[int] = ..., faults: _Optional[int] = ...) -> None: ...

class ReducedRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ReducedChunk(_message.Message):
    __slots__ = ("progress", "linkstats", "ports", "schedule", "conns", "health")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LINKSTATS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    CONNS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    progress: ProgressBatch
    linkstats: LinkStatBatch
    ports: PortBatch
    schedule: SampleSchedule
    conns: ConnSampleBatch
    health: HealthBatch
    def __init__(self, progress: _Optional[_Union[ProgressBatch, _Mapping]] = ..., linkstats: _Optional[_Union[LinkStatBatch, _Mapping]] = ..., ports: _Optional[_Union[PortBatch, _Mapping]] = ..., schedule: _Optional[_Union[SampleSchedule, _Mapping]] = ..., conns: _Optional[_Union[ConnSampleBatch, _Mapping]] = ..., health: _Optional[_Union[HealthBatch, _Mapping]] = ...) -> None: ...

class DetailsRequest(_message.Message):
    __slots__ = ("job", "fault_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    FAULT_ID_FIELD_NUMBER: _ClassVar[int]
    job: str
    fault_id: str
    def __init__(self, job: _Optional[str] = ..., fault_id: _Optional[str] = ...) -> None: ...

class HostTopology(_message.Message):
    __slots__ = ("host", "t_ns", "internals", "digest")
    HOST_FIELD_NUMBER: _ClassVar[int]
    T_NS_FIELD_NUMBER: _ClassVar[int]
    INTERNALS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    host: str
    t_ns: int
    internals: str
    digest: str
    def __init__(self, host: _Optional[str] = ..., t_ns: _Optional[int] = ..., internals: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class JobTopologyRequest(_message.Message):
    __slots__ = ("job", "with_graph")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WITH_GRAPH_FIELD_NUMBER: _ClassVar[int]
    job: str
    with_graph: bool
    def __init__(self, job: _Optional[str] = ..., with_graph: _Optional[bool] = ...) -> None: ...

class JobTopologyResponse(_message.Message):
    __slots__ = ("job", "json")
    JOB_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    job: str
    json: str
    def __init__(self, job: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...
