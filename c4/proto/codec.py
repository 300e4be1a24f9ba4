"""Columnar batches <-> numpy, without a Python loop per record.

Every ``bytes`` column of an ``OpBatch`` / ``ConnSampleBatch`` / ``ProgressBatch`` /
``LinkStatBatch`` / ``PortBatch`` / ``CollectorColumns`` is a raw little-endian array; a decoded
batch is a dict of numpy arrays of equal length plus the batch's string table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from c4.proto import c4_pb2

# name -> little-endian numpy dtype, in proto field order
OP_COLUMNS: dict[str, np.dtype] = {
    "rank": np.dtype("<i4"),
    "pg": np.dtype("<u4"),
    "seq": np.dtype("<i8"),
    "op": np.dtype("<u4"),
    "nbytes": np.dtype("<i8"),
    "dtype": np.dtype("<u4"),
    "t_enter_ns": np.dtype("<i8"),
    "t_start_ns": np.dtype("<i8"),
    "t_end_ns": np.dtype("<i8"),
    "status": np.dtype("u1"),
    "peer": np.dtype("<i4"),
}

CONN_COLUMNS: dict[str, np.dtype] = {
    "rank": np.dtype("<i4"),
    "local": np.dtype("<u4"),
    "remote": np.dtype("<u4"),
    "t_ns": np.dtype("<i8"),
    "bytes_acked": np.dtype("<i8"),
    "bytes_received": np.dtype("<i8"),
    "rtt_us": np.dtype("<i8"),
    "delivery_rate": np.dtype("<i8"),
    "retrans": np.dtype("<i8"),
    "busy_us": np.dtype("<i8"),
}

PROGRESS_COLUMNS: dict[str, np.dtype] = {
    "rank": np.dtype("<i4"),
    "pg": np.dtype("<u4"),
    "op": np.dtype("<i4"),          # -1: a collective
    "peer": np.dtype("<i4"),
    "t_ns": np.dtype("<i8"),
    "entered": np.dtype("<i8"),
    "completed": np.dtype("<i8"),
}

LINKSTAT_COLUMNS: dict[str, np.dtype] = {
    "src": np.dtype("<i4"),
    "dst": np.dtype("<i4"),         # -1: name it from the endpoints
    "local": np.dtype("<u4"),
    "remote": np.dtype("<u4"),
    "pg": np.dtype("<i4"),          # -1: not known
    "t_ns": np.dtype("<i8"),
    "window_ns": np.dtype("<i8"),
    "transfers": np.dtype("<i8"),
    "bytes": np.dtype("<i8"),       # proto field ``nbytes``
    "busy_ns": np.dtype("<i8"),
    "max_ns": np.dtype("<i8"),
    "open": np.dtype("<i8"),
    "open_since_ns": np.dtype("<i8"),
    "retrans": np.dtype("<i8"),
}

#: port counters, in the order of trace format version 2 (``diagnosis.engine.records``)
PORT_COUNTER_COLUMNS = ("link_downed", "symbol_errors", "rcv_errors", "xmit_discards",
                        "retrans", "rx_bytes", "tx_bytes")
PORT_COLUMNS: dict[str, np.dtype] = {
    "host": np.dtype("<u4"),
    "nic": np.dtype("<u4"),
    "t_ns": np.dtype("<i8"),
    "up": np.dtype("u1"),
    **{name: np.dtype("<i8") for name in PORT_COUNTER_COLUMNS},
}

#: the collectors' counters of one job on one sidecar (``CollectorColumns``)
COLLECTOR_COLUMNS: dict[str, np.dtype] = {
    "rank": np.dtype("<i4"),
    "recorded": np.dtype("<u8"),
    "dropped": np.dtype("<u8"),
    "shipped": np.dtype("<u8"),
    "t_ns": np.dtype("<i8"),
    "leaving": np.dtype("u1"),
}

# column name -> proto field name, where they differ (``bytes`` would shadow the builtin)
_FIELD = {"bytes": "nbytes"}

STATUS_NAMES = ("ok", "timeout", "error")
STATUS_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}


class BatchError(ValueError):
    """A batch whose columns cannot be decoded; the message names the column."""


@dataclass
class Columns:
    """A decoded batch: equal-length numpy columns and the string table they index."""

    columns: dict[str, np.ndarray]
    strings: list[str] = field(default_factory=list)
    error_text: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def names(self, column: str) -> np.ndarray:
        """The strings a string-indexed column points at, as an object array."""
        table = np.asarray(self.strings, dtype=object)
        return table[self.columns[column]] if len(table) else np.empty(0, dtype=object)


def _encode(msg: Any, spec: dict[str, np.dtype], cols: Columns) -> None:
    n = len(cols)
    msg.count = n
    if cols.strings:
        msg.strings.extend(cols.strings)
    for name, dtype in spec.items():
        if name not in cols.columns:
            raise BatchError(f"column {name!r} is missing")
        arr = np.ascontiguousarray(cols.columns[name], dtype=dtype)
        if arr.shape != (n,):
            raise BatchError(f"column {name!r} has shape {arr.shape}, expected ({n},)")
        setattr(msg, _FIELD.get(name, name), arr.tobytes())


def _decode(msg: Any, spec: dict[str, np.dtype], kind: str) -> Columns:
    n = msg.count
    out: dict[str, np.ndarray] = {}
    for name, dtype in spec.items():
        raw = getattr(msg, _FIELD.get(name, name))
        if len(raw) != n * dtype.itemsize:
            raise BatchError(
                f"{kind} column {name!r} holds {len(raw)} bytes; {n} records of "
                f"{dtype.itemsize}-byte {dtype.name} need {n * dtype.itemsize}"
            )
        out[name] = np.frombuffer(raw, dtype=dtype)
    return Columns(out, list(getattr(msg, "strings", ())))


def encode_ops(job: str, cols: Columns, attempt: int = 0) -> c4_pb2.OpBatch:
    msg = c4_pb2.OpBatch(job=job, attempt=attempt)
    _encode(msg, OP_COLUMNS, cols)
    for row, text in cols.error_text.items():
        msg.error_text[row] = text
    return msg


def decode_ops(msg: c4_pb2.OpBatch) -> Columns:
    """Decode and validate an OpBatch; raises BatchError naming what is wrong."""
    cols = _decode(msg, OP_COLUMNS, "OpBatch")
    nstr = len(cols.strings)
    for name in ("pg", "op", "dtype"):
        col = cols.columns[name]
        if len(col) and int(col.max()) >= nstr:
            raise BatchError(
                f"OpBatch column {name!r} points at string {int(col.max())}, "
                f"but the batch has {nstr} strings"
            )
    if len(cols) and int(cols.columns["status"].max()) >= len(STATUS_NAMES):
        raise BatchError("OpBatch column 'status' holds a value other than 0 (ok), 1, 2")
    if len(cols) and int(cols.columns["rank"].min()) < 0:
        raise BatchError("OpBatch column 'rank' holds a negative rank")
    for row in msg.error_text:
        if row >= len(cols):
            raise BatchError(f"OpBatch error_text names row {row} of a {len(cols)}-row batch")
    cols.error_text = dict(msg.error_text)
    return cols


def encode_conns(job: str, cols: Columns, attempt: int = 0) -> c4_pb2.ConnSampleBatch:
    msg = c4_pb2.ConnSampleBatch(job=job, attempt=attempt)
    _encode(msg, CONN_COLUMNS, cols)
    return msg


def decode_conns(msg: c4_pb2.ConnSampleBatch) -> Columns:
    cols = _decode(msg, CONN_COLUMNS, "ConnSampleBatch")
    nstr = len(cols.strings)
    for name in ("local", "remote"):
        col = cols.columns[name]
        if len(col) and int(col.max()) >= nstr:
            raise BatchError(f"ConnSampleBatch column {name!r} points past the string table")
    return cols


def _check_strings(cols: Columns, kind: str, names: tuple[str, ...], *,
                   none_ok: bool = False) -> None:
    """Every string-index column points into the table (-1 allowed where ``none_ok``)."""
    nstr = len(cols.strings)
    for name in names:
        col = cols.columns[name]
        if not len(col):
            continue
        if int(col.max()) >= nstr:
            raise BatchError(f"{kind} column {name!r} points at string {int(col.max())}, "
                             f"but the batch has {nstr} strings")
        if int(col.min()) < (-1 if none_ok else 0):
            raise BatchError(f"{kind} column {name!r} holds {int(col.min())}; string indices "
                             f"are >= {-1 if none_ok else 0}")


def _check_ranks(cols: Columns, kind: str, names: tuple[str, ...], *,
                 none_ok: bool = False) -> None:
    for name in names:
        col = cols.columns[name]
        if len(col) and int(col.min()) < (-1 if none_ok else 0):
            raise BatchError(f"{kind} column {name!r} holds rank {int(col.min())}; ranks are "
                             f">= 0{' (-1: none)' if none_ok else ''}")


def encode_progress(job: str, cols: Columns, attempt: int = 0) -> c4_pb2.ProgressBatch:
    msg = c4_pb2.ProgressBatch(job=job, attempt=attempt)
    _encode(msg, PROGRESS_COLUMNS, cols)
    return msg


def decode_progress(msg: c4_pb2.ProgressBatch) -> Columns:
    """Decode and validate a ProgressBatch; raises BatchError naming what is wrong."""
    cols = _decode(msg, PROGRESS_COLUMNS, "ProgressBatch")
    _check_strings(cols, "ProgressBatch", ("pg",))
    _check_strings(cols, "ProgressBatch", ("op",), none_ok=True)
    _check_ranks(cols, "ProgressBatch", ("rank",))
    _check_ranks(cols, "ProgressBatch", ("peer",), none_ok=True)
    return cols


def encode_linkstats(job: str, cols: Columns, attempt: int = 0) -> c4_pb2.LinkStatBatch:
    msg = c4_pb2.LinkStatBatch(job=job, attempt=attempt)
    _encode(msg, LINKSTAT_COLUMNS, cols)
    return msg


def decode_linkstats(msg: c4_pb2.LinkStatBatch) -> Columns:
    """Decode and validate a LinkStatBatch; raises BatchError naming what is wrong."""
    cols = _decode(msg, LINKSTAT_COLUMNS, "LinkStatBatch")
    _check_strings(cols, "LinkStatBatch", ("local", "remote"))
    _check_strings(cols, "LinkStatBatch", ("pg",), none_ok=True)
    _check_ranks(cols, "LinkStatBatch", ("src",))
    _check_ranks(cols, "LinkStatBatch", ("dst",), none_ok=True)
    if len(cols) and int(cols.columns["window_ns"].min()) <= 0:
        raise BatchError("LinkStatBatch column 'window_ns' holds a window of 0 ns or less")
    return cols


def encode_ports(job: str, cols: Columns, attempt: int = 0) -> c4_pb2.PortBatch:
    msg = c4_pb2.PortBatch(job=job, attempt=attempt)
    _encode(msg, PORT_COLUMNS, cols)
    return msg


def decode_ports(msg: c4_pb2.PortBatch) -> Columns:
    """Decode and validate a PortBatch; raises BatchError naming what is wrong."""
    cols = _decode(msg, PORT_COLUMNS, "PortBatch")
    _check_strings(cols, "PortBatch", ("host", "nic"))
    if len(cols) and int(cols.columns["up"].max()) > 1:
        raise BatchError("PortBatch column 'up' holds a value other than 0 (down) or 1 (up)")
    return cols


def encode_collectors(job: str, cols: Columns, attempt: int = 0) -> c4_pb2.CollectorColumns:
    msg = c4_pb2.CollectorColumns(job=job, attempt=attempt)
    _encode(msg, COLLECTOR_COLUMNS, cols)
    return msg


def decode_collectors(msg: c4_pb2.CollectorColumns) -> Columns:
    """Decode and validate a CollectorColumns; raises BatchError naming what is wrong."""
    cols = _decode(msg, COLLECTOR_COLUMNS, "CollectorColumns")
    _check_ranks(cols, "CollectorColumns", ("rank",))
    return cols


def collector_columns(entries: Iterable[c4_pb2.CollectorStats]
                      ) -> list[c4_pb2.CollectorColumns]:
    """Per-rank counters as columns, one message per job attempt."""
    return [encode_collectors(job, cols, attempt) for job, attempt, cols in _per_job(entries)]


def _per_job(entries: Iterable[c4_pb2.CollectorStats]) -> list[tuple[str, int, Columns]]:
    """Per-rank counters gathered into columns per job attempt."""
    per_job: dict[tuple[str, int], list[c4_pb2.CollectorStats]] = {}
    for c in entries:
        per_job.setdefault((c.job, c.attempt), []).append(c)
    return [(job, attempt, Columns({name: np.array([getattr(c, name) for c in part], dtype=dt)
                                    for name, dt in COLLECTOR_COLUMNS.items()}))
            for (job, attempt), part in per_job.items()]


def collector_counts(stats: c4_pb2.SidecarStats) -> list[tuple[str, int, Columns]]:
    """Every job's collector counters in a sidecar's statistics, ``(job, attempt, columns)``,
    whichever form the sidecar sent them in (one ``CollectorStats`` per rank, or columns per
    job); raises BatchError naming what is wrong."""
    out = [(c.job, c.attempt, decode_collectors(c)) for c in stats.collector_columns]
    for job, attempt, cols in _per_job(stats.collectors):
        _check_ranks(cols, "CollectorStats", ("rank",))
        out.append((job, attempt, cols))
    return out


def empty_columns(spec: dict[str, np.dtype]) -> Columns:
    return Columns({name: np.empty(0, dtype=dt) for name, dt in spec.items()})


STRING_COLUMNS = ("pg", "op", "dtype", "local", "remote", "host", "nic")
# string columns in which -1 means "none" (kept as -1 by ``concat``)
OPTIONAL_STRING_COLUMNS = ("op", "pg")


def concat(parts: list[Columns]) -> Columns:
    """Join batches that each carry their own string table into one batch with one table."""
    if len(parts) == 1:
        return parts[0]
    index: dict[str, int] = {}
    cols: dict[str, list[np.ndarray]] = {k: [] for k in parts[0].columns}
    errors: dict[int, str] = {}
    offset = 0
    for part in parts:
        remap = np.array([index.setdefault(s, len(index)) for s in part.strings] or [0],
                         dtype=np.int64)
        for name, col in part.columns.items():
            is_str = name in STRING_COLUMNS and len(col)
            if is_str and col.dtype.kind == "i" and name in OPTIONAL_STRING_COLUMNS:
                mapped = np.where(col >= 0, remap[np.maximum(col, 0)], -1)
                cols[name].append(mapped.astype(col.dtype, copy=False))
            elif is_str:
                cols[name].append(remap[col].astype(col.dtype, copy=False))
            else:
                cols[name].append(col)
        errors.update({offset + row: text for row, text in part.error_text.items()})
        offset += len(part)
    return Columns({k: np.concatenate(v) for k, v in cols.items()}, list(index), errors)
