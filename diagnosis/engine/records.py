"""Columnar connection records (shared specs section 2, ``conn`` lines) as the engine takes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from c4.proto.codec import Columns

CONN_DTYPES: dict[str, np.dtype] = {
    "src": np.dtype("<i4"),
    "dst": np.dtype("<i4"),
    "bytes": np.dtype("<i8"),
    "t_start_ns": np.dtype("<i8"),
    "t_end_ns": np.dtype("<i8"),
    "pg": np.dtype("<i4"),
    "seq": np.dtype("<i8"),
}


@dataclass
class ConnRecords:
    """One transfer per row on one connection ``src -> dst`` (global ranks).

    ``t_end_ns`` is -1 when the transfer had not finished; ``pg`` indexes ``strings`` (-1: not
    given) and ``seq`` is the operation's sequence number (-1: not given). ``paths``, when not
    None, holds per row the topology node ids from the source NIC to the destination NIC, or
    None for a row without a recorded path. ``retrans``, when not None, holds per row the
    segments the sender retransmitted during the transfer (sampled socket counters; None:
    unknown, as in traces).
    """

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    t_start_ns: np.ndarray
    t_end_ns: np.ndarray
    pg: np.ndarray
    seq: np.ndarray
    strings: list[str] = field(default_factory=list)
    paths: list[tuple[str, ...] | None] | None = None
    retrans: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.src)
        for name, dtype in CONN_DTYPES.items():
            arr = np.asarray(getattr(self, name), dtype=dtype)
            if arr.shape != (n,):
                raise ValueError(f"ConnRecords column {name!r} has shape {arr.shape}, "
                                 f"expected ({n},)")
            setattr(self, name, arr)
        if self.paths is not None and len(self.paths) != n:
            raise ValueError(f"ConnRecords.paths has {len(self.paths)} rows, expected {n}")
        if self.retrans is not None:
            self.retrans = np.asarray(self.retrans, dtype=np.int64)
            if self.retrans.shape != (n,):
                raise ValueError(f"ConnRecords column 'retrans' has shape "
                                 f"{self.retrans.shape}, expected ({n},)")

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def empty(cls) -> ConnRecords:
        return cls(**{name: np.empty(0, dtype=dt) for name, dt in CONN_DTYPES.items()},
                   strings=[], paths=None)

    @classmethod
    def build(cls, src: Sequence[int], dst: Sequence[int], nbytes: Sequence[int],
              t_start_ns: Sequence[int], t_end_ns: Sequence[int | None] | None = None,
              pg: Sequence[str | None] | None = None, seq: Sequence[int | None] | None = None,
              paths: Sequence[Sequence[str] | None] | None = None,
              retrans: Sequence[int] | None = None) -> ConnRecords:
        """Rows from plain Python sequences (None for absent optional values)."""
        n = len(src)
        strings: list[str] = []
        index: dict[str, int] = {}
        pg_col = np.full(n, -1, dtype=np.int32)
        if pg is not None:
            for i, name in enumerate(pg):
                if name is not None:
                    pg_col[i] = index.setdefault(name, len(index))
            strings = list(index)
        end = [-1 if v is None else v for v in t_end_ns] if t_end_ns is not None else [-1] * n
        sq = [-1 if v is None else v for v in seq] if seq is not None else [-1] * n
        p = [None if v is None else tuple(v) for v in paths] if paths is not None else None
        return cls(np.asarray(src), np.asarray(dst), np.asarray(nbytes), np.asarray(t_start_ns),
                   np.asarray(end, dtype=np.int64), pg_col, np.asarray(sq, dtype=np.int64),
                   strings, p, None if retrans is None else np.asarray(retrans))

    @classmethod
    def from_columns(cls, cols: Columns) -> ConnRecords:
        """Transfers from a Columns batch with src, dst, bytes, t_start_ns (t_end_ns, pg, seq,
        retrans optional), such as the daemon derives from socket counters."""
        n = len(cols)
        c = cols.columns
        pg = c.get("pg")
        return cls(c["src"], c["dst"], c["bytes"], c["t_start_ns"],
                   c.get("t_end_ns", np.full(n, -1)),
                   pg if pg is not None else np.full(n, -1),
                   c.get("seq", np.full(n, -1)), list(cols.strings), None, c.get("retrans"))

    def take(self, index: np.ndarray) -> ConnRecords:
        """The rows at ``index`` (same string table)."""
        paths = None if self.paths is None else [self.paths[i] for i in index.tolist()]
        return ConnRecords(self.src[index], self.dst[index], self.bytes[index],
                           self.t_start_ns[index], self.t_end_ns[index], self.pg[index],
                           self.seq[index], self.strings, paths,
                           None if self.retrans is None else self.retrans[index])


def _columns(obj: object, spec: dict[str, np.dtype], n: int, what: str) -> None:
    for name, dtype in spec.items():
        arr = np.asarray(getattr(obj, name), dtype=dtype)
        if arr.shape != (n,):
            raise ValueError(f"{what} column {name!r} has shape {arr.shape}, expected ({n},)")
        setattr(obj, name, arr)


PROGRESS_DTYPES: dict[str, np.dtype] = {
    "rank": np.dtype("<i8"),
    "pg": np.dtype("<i4"),
    "op": np.dtype("<i4"),
    "peer": np.dtype("<i8"),
    "t_ns": np.dtype("<i8"),
    "entered": np.dtype("<i8"),
    "completed": np.dtype("<i8"),
}


@dataclass
class ProgressRecords:
    """How far ranks have got on their communicators (trace ``progress`` lines, version 2).

    One row per (rank, communicator) and window in which it changed; for send/recv per
    (rank, communicator, op, peer) with the per-pair sequence numbers. ``pg`` and ``op`` index
    ``strings`` (``op`` -1: not given); ``peer`` -1: not given; ``entered`` and ``completed``
    are the highest seq entered / completed by ``t_ns``, -1 while there is none.
    """

    rank: np.ndarray
    pg: np.ndarray
    op: np.ndarray
    peer: np.ndarray
    t_ns: np.ndarray
    entered: np.ndarray
    completed: np.ndarray
    strings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _columns(self, PROGRESS_DTYPES, len(self.rank), "ProgressRecords")

    def __len__(self) -> int:
        return len(self.rank)

    @classmethod
    def build(cls, rank: Sequence[int], pg: Sequence[str], t_ns: Sequence[int],
              entered: Sequence[int | None], completed: Sequence[int | None],
              op: Sequence[str | None] | None = None,
              peer: Sequence[int | None] | None = None) -> ProgressRecords:
        """Rows from plain Python sequences (None for absent optional values)."""
        n = len(rank)
        index: dict[str, int] = {}
        pg_col = [index.setdefault(p, len(index)) for p in pg]
        op_col = [-1 if o is None else index.setdefault(o, len(index))
                  for o in (op if op is not None else [None] * n)]

        def opt(values: Sequence[int | None] | None) -> list[int]:
            return [-1 if v is None else int(v) for v in (values or [None] * n)]

        return cls(np.asarray(rank), np.asarray(pg_col), np.asarray(op_col, dtype=np.int64),
                   np.asarray(opt(peer)), np.asarray(t_ns), np.asarray(opt(entered)),
                   np.asarray(opt(completed)), list(index))


LINKSTAT_DTYPES: dict[str, np.dtype] = {
    "src": np.dtype("<i8"),
    "dst": np.dtype("<i8"),
    "t_ns": np.dtype("<i8"),
    "window_ns": np.dtype("<i8"),
    "pg": np.dtype("<i4"),
    "transfers": np.dtype("<i8"),
    "bytes": np.dtype("<i8"),
    "busy_ns": np.dtype("<i8"),
    "max_ns": np.dtype("<i8"),
    "open": np.dtype("<i8"),
    "open_since_ns": np.dtype("<i8"),
    "retrans": np.dtype("<i8"),
}


@dataclass
class LinkStatRecords:
    """One connection's transfers over one window (trace ``linkstat`` lines, version 2).

    The window ends at ``t_ns`` and lasts ``window_ns``; ``transfers`` completed in it, moving
    ``bytes`` in ``busy_ns`` (the sum of their durations; ``max_ns`` the longest); ``open`` were
    in flight at ``t_ns``, the oldest since ``open_since_ns`` (-1: none open). ``pg`` indexes
    ``strings`` (-1: not given); ``retrans`` -1: not counted. ``paths`` as in ConnRecords.
    """

    src: np.ndarray
    dst: np.ndarray
    t_ns: np.ndarray
    window_ns: np.ndarray
    pg: np.ndarray
    transfers: np.ndarray
    bytes: np.ndarray
    busy_ns: np.ndarray
    max_ns: np.ndarray
    open: np.ndarray
    open_since_ns: np.ndarray
    retrans: np.ndarray
    strings: list[str] = field(default_factory=list)
    paths: list[tuple[str, ...] | None] | None = None

    def __post_init__(self) -> None:
        n = len(self.src)
        _columns(self, LINKSTAT_DTYPES, n, "LinkStatRecords")
        if self.paths is not None and len(self.paths) != n:
            raise ValueError(f"LinkStatRecords.paths has {len(self.paths)} rows, expected {n}")

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def build(cls, src: Sequence[int], dst: Sequence[int], t_ns: Sequence[int],
              window_ns: Sequence[int], *, pg: Sequence[str | None] | None = None,
              transfers: Sequence[int] | None = None, nbytes: Sequence[int] | None = None,
              busy_ns: Sequence[int] | None = None, max_ns: Sequence[int] | None = None,
              open_: Sequence[int] | None = None,
              open_since_ns: Sequence[int | None] | None = None,
              retrans: Sequence[int | None] | None = None,
              paths: Sequence[Sequence[str] | None] | None = None) -> LinkStatRecords:
        """Rows from plain Python sequences (absent counts are 0, absent times -1)."""
        n = len(src)
        index: dict[str, int] = {}
        pg_col = [-1 if p is None else index.setdefault(p, len(index))
                  for p in (pg if pg is not None else [None] * n)]

        def cnt(values: Sequence[int] | None) -> list[int]:
            return [int(v or 0) for v in (values or [0] * n)]

        def opt(values: Sequence[int | None] | None) -> list[int]:
            return [-1 if v is None else int(v) for v in (values or [None] * n)]

        p = [None if v is None else tuple(v) for v in paths] if paths is not None else None
        return cls(np.asarray(src), np.asarray(dst), np.asarray(t_ns), np.asarray(window_ns),
                   np.asarray(pg_col), np.asarray(cnt(transfers)), np.asarray(cnt(nbytes)),
                   np.asarray(cnt(busy_ns)), np.asarray(cnt(max_ns)), np.asarray(cnt(open_)),
                   np.asarray(opt(open_since_ns)), np.asarray(opt(retrans)), list(index), p)


#: port counters of trace ``port`` lines, in their order of the format
PORT_COUNTERS = ("link_downed", "symbol_errors", "rcv_errors", "xmit_discards", "retrans",
                 "rx_bytes", "tx_bytes")


@dataclass
class PortRecords:
    """A NIC port's state and cumulative counters (trace ``port`` lines, version 2).

    ``host`` and ``nic`` index ``strings`` (topology ids); ``up`` is 1 for state ``up``, 0 for
    ``down``; ``counters`` maps each name of :data:`PORT_COUNTERS` present in the batch to a
    column (-1: not given in that row).
    """

    host: np.ndarray
    nic: np.ndarray
    t_ns: np.ndarray
    up: np.ndarray
    strings: list[str] = field(default_factory=list)
    counters: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.host)
        _columns(self, {"host": np.dtype("<i4"), "nic": np.dtype("<i4"),
                        "t_ns": np.dtype("<i8"), "up": np.dtype("i1")}, n, "PortRecords")
        for name, col in list(self.counters.items()):
            if name not in PORT_COUNTERS:
                raise ValueError(f"PortRecords counter {name!r} is not one of "
                                 f"{', '.join(PORT_COUNTERS)}")
            arr = np.asarray(col, dtype=np.int64)
            if arr.shape != (n,):
                raise ValueError(f"PortRecords counter {name!r} has shape {arr.shape}, "
                                 f"expected ({n},)")
            self.counters[name] = arr

    def __len__(self) -> int:
        return len(self.host)

    @classmethod
    def build(cls, host: Sequence[str], nic: Sequence[str], t_ns: Sequence[int],
              state: Sequence[str], **counters: Sequence[int | None]) -> PortRecords:
        """Rows from plain Python sequences; ``state`` is ``up`` or ``down``."""
        index: dict[str, int] = {}
        h = [index.setdefault(x, len(index)) for x in host]
        c = [index.setdefault(x, len(index)) for x in nic]
        return cls(np.asarray(h), np.asarray(c), np.asarray(t_ns),
                   np.asarray([1 if s == "up" else 0 for s in state]), list(index),
                   {k: np.asarray([-1 if v is None else int(v) for v in vals])
                    for k, vals in counters.items()})
