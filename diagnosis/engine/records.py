"""Columnar connection records (shared specs section 2, ``conn`` lines) as the engine takes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from proto.codec import Columns

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
        return cls(**{name: np.empty(0, dtype=dt) for name, dt in CONN_DTYPES.items()})

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
