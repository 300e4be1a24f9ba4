"""Streaming reader of telemetry traces (shared specs section 2, JSON Lines).

The file is read in blocks of lines; each block is parsed in one ``orjson`` call and its
telemetry lines (op and conn; progress, linkstat and port of format version 2) become columnar
batches, one per type, so the engine receives vectorized chunks and memory stays bounded by the
block size. A batch that does not validate on the fast path is checked record by record to name
the first bad line and field in a ``FormatError``. Lines of types this reader does not know are
skipped with one warning per type, as the format asks, so that newer writers stay readable.
"""

from __future__ import annotations

import gzip
import io
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import orjson

from c4.errors import FormatError
from c4.proto.codec import OP_COLUMNS, STATUS_CODES, Columns
from c4.proto.health import HealthRecord
from diagnosis.engine.records import ConnRecords, LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.trace.columns import (
    Bad,
    Rows,
    StructRows,
    intern,
    opt_intern,
    opt_nonneg_column,
    required,
)
from diagnosis.trace.fields import Fields
from diagnosis.trace.health import health_record
from diagnosis.trace.reader_v2 import (
    check_linkstat,
    check_port,
    check_progress,
    linkstat_batch,
    port_batch,
    progress_batch,
)
from diagnosis.trace.typed import decode_block

log = logging.getLogger(__name__)

#: the record types this reader knows; a line of any other type is skipped with a warning
#: the shared format's kinds, and this project's own ``health`` (diagnosis/trace/README.md)
TYPES = ("meta", "rank", "group", "op", "conn", "progress", "linkstat", "port", "health", "end")
VERSIONS = (1, 2)
#: the longest line read: a group of a million ranks is ~8 MB; a line past this is no trace
#: record (reading it whole would cost several times its size in memory: /dev/zero is endless)
MAX_LINE_BYTES = 16 << 20
#: times (ns) and sizes beyond this are refused: sums and differences of two must not overflow
#: int64 in the detectors (2**62 ns is the year 2116)
MAX_VALUE = 1 << 62


class ByteStream(Protocol):
    """What the reader needs of a binary stream: an open file, a ``gzip.GzipFile``, a pipe."""

    def read(self, size: int = -1, /) -> bytes: ...

    def readline(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str
    gpu: str | None = None
    nic: str | None = None


@dataclass(frozen=True)
class GroupInfo:
    pg: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Meta:
    version: int
    job: str | None = None
    #: the trace holds the calls that c4.proto.sampling keeps at this factor (1: every call)
    sample: int = 1


@dataclass(frozen=True)
class End:
    t_ns: int


@dataclass(frozen=True)
class Skipped:
    """Lines of a record type this reader does not know (first at ``line``): dropped, with one
    warning per type, by :func:`drop_unknown`."""

    kind: str
    line: int


Batch = Columns | ConnRecords | ProgressRecords | LinkStatRecords | PortRecords
Item = Meta | RankInfo | GroupInfo | End | HealthRecord | Batch


def read_trace(path: str | Path | ByteStream, block_bytes: int = 4 << 20,
               name: str | None = None) -> Iterator[Item]:
    """Yield the trace's records in file order, telemetry as columnar batches (per block, one per
    record type: op Columns, ConnRecords, ProgressRecords, LinkStatRecords, PortRecords). A
    path ending in ``.gz`` is decompressed on the fly. Lines of record types this reader does
    not know are skipped with one warning per type.

    Raises FormatError naming file, line and field for malformed input.
    """
    if isinstance(path, (str, Path)):
        source = name or str(path)
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rb") as fh:
            yield from drop_unknown(_read(fh, block_bytes, source), source)
    else:
        source = name or str(getattr(path, "name", "<stream>"))
        yield from drop_unknown(_read(path, block_bytes, source), source)


def drop_unknown(items: Iterable[Item | Skipped], source: str) -> Iterator[Item]:
    """``items`` without the Skipped markers, warning once per unknown record type."""
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, Skipped):
            yield item
        elif item.kind not in seen:
            seen.add(item.kind)
            log.warning("%s:%d: skipping records of unknown type %r (this c4 reads %s); a newer "
                        "c4 may know them, or check the exporter that wrote them", source,
                        item.line, item.kind, ", ".join(TYPES))


def _read(fh: ByteStream, block_bytes: int, source: str) -> Iterator[Item | Skipped]:
    for data, first, lines in read_blocks(fh, block_bytes, source):
        yield from parse_block(data, first, lines, source)


def _too_long(source: str, line: int, max_line_bytes: int) -> FormatError:
    return FormatError(f"line longer than {max_line_bytes >> 20} MiB, the longest c4 reads: a "
                       "trace holds one JSON record per line; is this a c4 trace?",
                       source=source, line=line)


def read_blocks(fh: ByteStream, block_bytes: int, source: str = "",
                max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes, int, int]]:
    """The file in blocks of whole lines of about ``block_bytes``: each block, the number of
    its first line and how many lines it has. Raises FormatError at a line longer than
    ``max_line_bytes``, having read at most that much past the block (never a whole endless
    line: /dev/zero)."""
    first = 1
    while True:
        data = fh.read(block_bytes)
        if not data:
            return
        if not data.endswith(b"\n"):
            data += fh.readline(max_line_bytes + 1)
        lines = block_lines(data, first, source, max_line_bytes)
        yield data, first, lines
        first += lines


def block_spans(fh: BinaryIO, block_bytes: int,
                max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, int]]:
    """Where :func:`read_blocks` cuts the seekable file ``fh``: each block's start and end
    offsets, found by reading only the line across each cut (the blocks themselves are read
    where they are parsed). A block ending in a line longer than ``max_line_bytes`` is the
    last: :func:`block_lines` names that line when the block is read."""
    start = 0
    while True:
        # the block's last byte and the rest of its line: a block that ends at a newline
        # reads just that newline, as read_blocks does
        fh.seek(start + block_bytes - 1)
        tail = fh.readline(max_line_bytes + 2)
        if not tail:
            size = fh.seek(0, io.SEEK_END)
            if size > start:
                yield start, size
            return
        end = start + block_bytes - 1 + len(tail)
        yield start, end
        if len(tail) > max_line_bytes and not tail.endswith(b"\n"):
            return
        start = end


def block_lines(data: bytes, first: int, source: str = "",
                max_line_bytes: int = MAX_LINE_BYTES) -> int:
    """How many lines the block ``data`` holds (the file's last line may lack its newline);
    FormatError at a line longer than ``max_line_bytes``, ``first`` the number of the block's
    first line."""
    _check_lines(data, first, source, max_line_bytes)
    return data.count(b"\n") + (not data.endswith(b"\n"))


def _check_lines(data: bytes, first: int, source: str, max_line_bytes: int) -> None:
    """No line of the block ``data`` longer than ``max_line_bytes``."""
    if len(data) <= max_line_bytes:
        return
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.r_[0, ends + 1]
    lengths = np.r_[ends, len(data)] - starts
    over = np.flatnonzero(lengths > max_line_bytes)
    if len(over):
        raise _too_long(source, first + int(over[0]), max_line_bytes)


def parse_block(data: bytes, first: int, lines: int, source: str) -> Iterator[Item | Skipped]:
    """The items of one block of ``lines`` whole lines, ``first`` the number of its first.

    The common block, telemetry lines alone, is decoded into typed records (diagnosis.trace.
    typed); any other block, and one whose columns the batch builders refuse from those, is
    read the general way, into dicts, which reads every record type and names a bad line and
    field."""
    kinds = decode_block(data, lines)
    if kinds is not None:
        try:
            batches = [_BATCHES[kind][0](StructRows(recs)) for kind, recs in kinds.items()]
        except (Bad, KeyError, ValueError, TypeError, OverflowError):
            pass
        else:
            yield from batches
            return
    yield from _block(io.BytesIO(data).readlines(), first, source)


@dataclass
class _Block:
    """One block of lines and the line number of its first, in the file ``source``."""

    lines: list[bytes]
    first: int
    source: str


def _block(lines: list[bytes], first: int, source: str) -> Iterator[Item | Skipped]:
    blk = _Block(lines, first, source)
    parsed = _parse(blk)
    if parsed is None:
        return
    objs, types = parsed
    try:
        kinds = set(types)
    except TypeError:          # an unhashable "type": _mixed names the line
        kinds = {None}
    if kinds <= _BATCH_KINDS:
        # the common block: only telemetry; one batch per kind, split by comprehension
        if len(kinds) == 1:
            yield _batch(types[0], objs, blk)
            return
        for kind in BATCH_TYPES:
            if kind in kinds:
                yield _batch(kind, [o for o, t in zip(objs, types) if t == kind], blk)
        return
    yield from _mixed(objs, types, blk)


def _parse(blk: _Block) -> tuple[list[dict[str, Any]], list[Any]] | None:
    """The block's records and their types; None for a block of blank lines."""
    try:
        # one parse for the whole block; a blank or broken line fails it, and the block is
        # parsed again without blank lines, then line by line to name the bad one
        objs = orjson.loads(b"[" + b",".join(blk.lines) + b"]")
        types = required(objs, "type")
        if len(objs) != len(blk.lines):     # a line held two values ("1, 2"): find it
            raise ValueError
        return objs, types
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        pass
    body = [ln for ln in blk.lines if ln.strip()]
    if not body:
        return None
    try:
        objs = orjson.loads(b"[" + b",".join(body) + b"]")
        types = required(objs, "type")
        if len(objs) != len(body):
            raise ValueError
        return objs, types
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        return _slow_parse(blk.lines, blk.first, blk.source)


def _mixed(objs: list[dict[str, Any]], types: list[Any],
           blk: _Block) -> Iterator[Item | Skipped]:
    """A block with records other than telemetry, in file order: telemetry gathered into
    batches up to each of them."""
    line_of = _line_numbers(blk.lines, blk.first)
    pending: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
    skipped: set[str] = set()
    for i, (o, t) in enumerate(zip(objs, types)):
        known = isinstance(t, str) and t in TYPES
        if known and t in _BATCH_KINDS:
            recs, lines = pending.setdefault(t, ([], []))
            recs.append(o)
            lines.append(line_of[i])
            continue
        if isinstance(t, str) and not known:
            if t not in skipped:
                skipped.add(t)
                yield Skipped(t, line_of[i])
            continue
        # rank and group records precede the ops that use them: flush what came before
        for kind, (recs, lines) in pending.items():
            yield _batch(kind, recs, blk, lines)
        pending = {}
        yield _small(o, blk.source, line_of[i])
    for kind, (recs, lines) in pending.items():
        yield _batch(kind, recs, blk, lines)


def _line_numbers(lines: list[bytes], first: int) -> list[int]:
    return [first + i for i, ln in enumerate(lines) if ln.strip()]


def _slow_parse(lines: list[bytes], first: int, source: str) -> tuple[list[Any], list[Any]]:
    objs, types = [], []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            o = orjson.loads(ln)
        except orjson.JSONDecodeError as exc:
            raise FormatError(f"not valid JSON ({exc}); each line must be one JSON object",
                              source=source, line=first + i) from None
        if not isinstance(o, dict):
            raise FormatError("each line must be a JSON object", source=source, line=first + i)
        _type_of(o, source, first + i)
        objs.append(o)
        types.append(o["type"])
    return objs, types


def _type_of(o: dict[str, Any], source: str, line: int) -> str:
    t = o.get("type")
    if not isinstance(t, str):
        raise FormatError(f"each record needs a string 'type' ({', '.join(TYPES)}), got {t!r}",
                          source=source, line=line, field="type")
    return t


def _small(o: dict[str, Any], source: str, line: int) -> Item:
    t = _type_of(o, source, line)
    f = Fields(o, t, source, line)
    if t == "rank":
        return RankInfo(f.integer("rank"), f.string("host", "a host id"),
                        f.opt_string("gpu") or None, f.opt_string("nic") or None)
    if t == "group":
        ranks = f.int_list("ranks", "a list of global ranks (integers)")
        return GroupInfo(f.string("pg", "a communicator name"), tuple(ranks))
    if t == "meta":
        return _meta(f)
    if t == "end":
        return End(f.integer("t_ns"))
    if t == "health":
        return health_record(f)
    raise AssertionError(f"{t!r} is not a record of its own")   # _mixed sends only those


def _meta(f: Fields) -> Meta:
    version = f.integer("version")
    if version not in VERSIONS:
        f.fail("version", f"says format version {version}, which this c4 does not read (it "
               f"reads {' and '.join(map(str, VERSIONS))}): a newer c4 may")
    sample = f.opt_integer("sample", 1)
    if sample is None:
        sample = 1
    if sample != 1 and version == 1:
        f.fail("sample", f"has sample {sample}, but only version 2 samples calls: write "
               "\"version\": 2, or leave the sample out of a trace that holds every call")
    return Meta(version, f.opt_string("job") or None, sample)


def _batch(kind: str, recs: list[dict[str, Any]], blk: _Block,
           line_of: list[int] | None = None) -> Batch:
    """The records ``recs`` of type ``kind`` as one columnar batch; ``line_of`` their line
    numbers, where known (else, the batch holds every record of that type in the block)."""
    build, check = _BATCHES[kind]
    try:
        return build(Rows(recs))
    except (Bad, KeyError, ValueError, TypeError, OverflowError):
        _explain(recs, kind, check, blk, line_of)
        raise   # _explain always raises; keeps type checkers calm


def _ops_fast(rows: Rows) -> Columns:
    table: dict[str, int] = {}
    cols: dict[str, np.ndarray] = {
        "rank": rows.ints("rank"),
        "pg": intern(rows.required("pg"), table),
        "seq": rows.ints("seq"),
        "op": intern(rows.required("op"), table),
        "nbytes": rows.ints("bytes"),
        "dtype": _dtypes(rows.optional("dtype"), table),
        "t_enter_ns": rows.ints("t_enter_ns"),
        "t_start_ns": rows.opt_ints("t_start_ns"),
        "t_end_ns": rows.opt_ints("t_end_ns"),
        "peer": rows.opt_ints("peer"),
        "status": _statuses(rows.optional("status")),
    }
    if (cols["rank"] < 0).any() or (cols["seq"] < 0).any():
        raise Bad
    if not _in_range(cols["t_enter_ns"], cols["nbytes"]) or \
            not _in_range(cols["t_start_ns"], cols["t_end_ns"], unset=-1):
        raise Bad
    out = {name: cols[name].astype(dt, copy=False) for name, dt in OP_COLUMNS.items()}
    return Columns(out, list(table))


def _in_range(*cols: np.ndarray, unset: int | None = None) -> bool:
    """Every value of ``cols`` within 0..MAX_VALUE (or ``unset``)."""
    for col in cols:
        if not len(col):
            continue
        bad = (col < 0) | (col > MAX_VALUE)
        if unset is not None:
            bad &= col != unset
        if bad.any():
            return False
    return True


def _check_range(f: Fields, name: str, value: Any, unset: bool = False) -> None:
    if isinstance(value, int) and not (0 <= value <= MAX_VALUE or (unset and value == -1)):
        f.fail(name, f"field {name!r} is {value}: times and sizes run from 0 to 2**62"
               + (" (-1: not set)" if unset else "") + "; was this trace written by a broken "
               "exporter, or a clock gone wrong?")


def _dtypes(dtypes: list[Any], table: dict[str, int]) -> np.ndarray:
    if dtypes.count(None) == len(dtypes):     # the common case: no op says its dtype
        return np.full(len(dtypes), table.setdefault("", len(table)), dtype=np.int64)
    return intern([d or "" for d in dtypes], table)


def _statuses(status: list[Any]) -> np.ndarray:
    # the common case, every call ok, costs one count in C
    if status.count(None) == len(status) or not any(s is not None and s != "ok"
                                                    for s in status):
        return np.zeros(len(status), dtype=np.uint8)
    codes = [STATUS_CODES.get("ok" if s is None else s, -1) if isinstance(s, str) or s is None
             else -1 for s in status]
    if min(codes) < 0:
        raise Bad
    return np.asarray(codes, dtype=np.uint8)


def _check_op(f: Fields) -> None:
    f.integer("rank", 0)
    f.string("pg", "a communicator name")
    f.integer("seq", 0)
    f.string("op", "an operation name")
    f.integer("bytes")
    f.integer("t_enter_ns")
    for name in ("t_start_ns", "t_end_ns", "peer"):
        f.opt_integer(name)
    f.opt_string("dtype")
    for name in ("t_enter_ns", "bytes"):
        _check_range(f, name, f.rec[name])
    for name in ("t_start_ns", "t_end_ns"):
        _check_range(f, name, f.rec.get(name), unset=True)
    s = f.rec.get("status")
    if s is not None and (not isinstance(s, str) or s not in STATUS_CODES):
        f.fail("status", f"status {s!r} is not one of ok, timeout, error")


def _conns_fast(rows: Rows) -> ConnRecords:
    table: dict[str, int] = {}
    retrans = rows.optional("retrans")
    nbytes, start, end = rows.ints("bytes"), rows.ints("t_start_ns"), rows.opt_ints("t_end_ns")
    if not _in_range(nbytes, start) or not _in_range(end, unset=-1):
        raise Bad
    return ConnRecords(
        rows.ints("src"), rows.ints("dst"), nbytes, start,
        end, opt_intern(rows.optional("pg"), table),
        rows.opt_ints("seq"), list(table), rows.paths("path"),
        None if retrans.count(None) == len(retrans)
        else opt_nonneg_column(retrans, -1, rows.typed))


def _check_conn(f: Fields) -> None:
    for name in ("src", "dst", "bytes", "t_start_ns"):
        f.integer(name)
    f.opt_integer("t_end_ns")
    f.opt_integer("seq")
    f.opt_string("pg", "a communicator name")
    f.opt_path("path")
    f.opt_integer("retrans", 0)
    for name in ("bytes", "t_start_ns"):
        _check_range(f, name, f.rec[name])
    _check_range(f, "t_end_ns", f.rec.get("t_end_ns"), unset=True)


def _explain(records: list[dict[str, Any]], kind: str, check: Callable[[Fields], None],
             blk: _Block, line_of: list[int] | None) -> None:
    """Find the first bad record of a batch and raise a FormatError naming its line and field."""
    if line_of is None:
        # the batch holds the block's records of this kind in file order: find their lines
        line_of = [blk.first + i for i, ln in enumerate(blk.lines)
                   if ln.strip() and _is_type(ln, kind)]
    for o, line in zip(records, line_of):
        check(Fields(o, kind, blk.source, line))
    raise FormatError(f"malformed {kind} records in this block", source=blk.source,
                      line=blk.first)


def _is_type(line: bytes, kind: str) -> bool:
    try:
        return orjson.loads(line).get("type") == kind
    except (orjson.JSONDecodeError, AttributeError):
        return False


_BATCHES: dict[str, tuple[Callable[[Rows], Batch], Callable[[Fields], None]]] = {
    "op": (_ops_fast, _check_op),
    "conn": (_conns_fast, _check_conn),
    "progress": (progress_batch, check_progress),
    "linkstat": (linkstat_batch, check_linkstat),
    "port": (port_batch, check_port),
}
#: the record types that come as columnar batches, in the order a block yields them
BATCH_TYPES = tuple(_BATCHES)
_BATCH_KINDS = frozenset(_BATCHES)
