"""Streaming reader of telemetry traces (shared specs section 2, JSON Lines).

The file is read in blocks of lines; each block is parsed in one ``orjson`` call and its op and
conn lines become columnar batches, so the engine receives vectorized chunks and memory stays
bounded by the block size. A block that does not parse or validate on the fast path is re-read
line by line to name the first bad line and field in a ``FormatError``.
"""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from diagnosis.engine.records import ConnRecords
from diagnosis.errors import FormatError
from proto.codec import OP_COLUMNS, STATUS_CODES, Columns

TYPES = ("meta", "rank", "group", "op", "conn", "end")

_OP_INT = ("rank", "seq", "bytes", "t_enter_ns")          # required integers of an op line
_OP_OPT_INT = ("t_start_ns", "t_end_ns", "peer")
_CONN_INT = ("src", "dst", "bytes", "t_start_ns")


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


@dataclass(frozen=True)
class End:
    t_ns: int


Item = Meta | RankInfo | GroupInfo | Columns | ConnRecords | End


class _Bad(Exception):
    """Fast path failed: re-read the block line by line."""


def read_trace(path: str | Path | BinaryIO, block_bytes: int = 4 << 20,
               name: str | None = None) -> Iterator[Item]:
    """Yield the trace's records in file order, ops and conns as columnar batches (one per block).
    A path ending in ``.gz`` is decompressed on the fly.

    Raises FormatError naming file, line and field for malformed input.
    """
    if isinstance(path, (str, Path)):
        source = name or str(path)
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rb") as fh:
            yield from _read(fh, block_bytes, source)
    else:
        yield from _read(path, block_bytes, name or getattr(path, "name", "<stream>"))


def _read(fh: BinaryIO, block_bytes: int, source: str) -> Iterator[Item]:
    line_no = 0
    while True:
        lines = fh.readlines(block_bytes)
        if not lines:
            return
        first = line_no + 1
        line_no += len(lines)
        yield from _block(lines, first, source)


def _block(lines: list[bytes], first: int, source: str) -> Iterator[Item]:
    try:
        # one parse for the whole block; a blank or broken line fails it, and the block is
        # parsed again without blank lines, then line by line to name the bad one
        objs = orjson.loads(b"[" + b",".join(lines) + b"]")
        types = [o["type"] for o in objs]
        if len(objs) != len(lines):     # a line held two values ("1, 2"): find it
            raise ValueError
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        body = [ln for ln in lines if ln.strip()]
        if not body:
            return
        try:
            objs = orjson.loads(b"[" + b",".join(body) + b"]")
            types = [o["type"] for o in objs]
            if len(objs) != len(body):
                raise ValueError from None
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            objs, types = _slow_parse(lines, first, source)
    try:
        kinds = set(types)
    except TypeError:          # an unhashable "type": the loop below names the line
        kinds = {None}
    if kinds <= {"op", "conn"}:
        # the common block: only telemetry, split by comprehension
        if "op" in kinds:
            yield _ops([o for o, t in zip(objs, types) if t == "op"] if "conn" in kinds
                       else objs, lines, first, source)
        if "conn" in kinds:
            yield _conns([o for o, t in zip(objs, types) if t == "conn"] if "op" in kinds
                         else objs, lines, first, source)
        return
    line_of: list[int] | None = None
    ops: list[dict[str, Any]] = []
    conns: list[dict[str, Any]] = []
    for i, (o, t) in enumerate(zip(objs, types)):
        if t == "op":
            ops.append(o)
            continue
        if t == "conn":
            conns.append(o)
            continue
        if line_of is None:
            line_of = _line_numbers(lines, first)
        # rank and group records precede the ops that use them: flush what came before
        if ops:
            yield _ops(ops, lines, first, source)
            ops = []
        if conns:
            yield _conns(conns, lines, first, source)
            conns = []
        yield _small(o, t, source, line_of[i])
    if ops:
        yield _ops(ops, lines, first, source)
    if conns:
        yield _conns(conns, lines, first, source)


def _line_numbers(lines: list[bytes], first: int) -> list[int]:
    return [first + i for i, ln in enumerate(lines) if ln.strip()]


def _slow_parse(lines: list[bytes], first: int, source: str) -> tuple[list[Any], list[str]]:
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
        t = o.get("type")
        if t not in TYPES:
            raise FormatError(f"unknown record type {t!r}; expected one of {', '.join(TYPES)}",
                              source=source, line=first + i, field="type")
        objs.append(o)
        types.append(t)
    return objs, types


def _small(o: dict[str, Any], t: str, source: str, line: int) -> Item:
    def need(field: str, kind: type | tuple[type, ...], what: str) -> Any:
        v = o.get(field)
        if v is None or not isinstance(v, kind) or isinstance(v, bool):
            raise FormatError(f"{t} record needs {what}", source=source, line=line, field=field)
        return v

    def opt(field: str) -> str | None:
        v = o.get(field)
        if v is not None and not isinstance(v, str):
            raise FormatError(f"{t} record field must be a string", source=source, line=line,
                              field=field)
        return v or None

    if t == "rank":
        return RankInfo(need("rank", int, "an integer rank"), need("host", str, "a host id"),
                        opt("gpu"), opt("nic"))
    if t == "group":
        ranks = need("ranks", list, "a list of global ranks")
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise FormatError("group ranks must be integers", source=source, line=line,
                              field="ranks")
        return GroupInfo(need("pg", str, "a communicator name"), tuple(ranks))
    if t == "meta":
        version = need("version", int, "the format version (1)")
        if version != 1:
            raise FormatError(f"format version {version} is not supported (only 1)",
                              source=source, line=line, field="version")
        return Meta(version, opt("job"))
    if t == "end":
        return End(need("t_ns", int, "an integer time in ns"))
    raise FormatError(f"unknown record type {t!r}", source=source, line=line, field="type")


def _int_column(values: list[Any]) -> np.ndarray:
    arr = np.array(values)
    if arr.dtype.kind not in "iu":
        raise _Bad
    return arr.astype(np.int64, copy=False)


def _opt_int_column(values: list[Any]) -> np.ndarray:
    try:
        return _int_column(values)
    except (_Bad, ValueError, TypeError):
        pass
    out = [-1 if v is None else v for v in values]
    return _int_column(out)


def _intern(values: list[Any], table: dict[str, int]) -> np.ndarray:
    uniq = dict.fromkeys(values)          # hashing in C; types checked once per distinct value
    if not all(isinstance(v, str) for v in uniq):
        raise _Bad
    for v in uniq:
        uniq[v] = table.setdefault(v, len(table))
    return np.array([uniq[v] for v in values], dtype=np.uint32)


def _ops(ops: list[dict[str, Any]], lines: list[bytes], first: int, source: str) -> Columns:
    try:
        return _ops_fast(ops)
    except (_Bad, KeyError, ValueError, TypeError, OverflowError):
        _explain(ops, "op", lines, first, source)
        raise   # _explain always raises; keeps type checkers calm


def _ops_fast(ops: list[dict[str, Any]]) -> Columns:
    table: dict[str, int] = {}
    cols: dict[str, np.ndarray] = {
        "rank": _int_column([o["rank"] for o in ops]),
        "pg": _intern([o["pg"] for o in ops], table),
        "seq": _int_column([o["seq"] for o in ops]),
        "op": _intern([o["op"] for o in ops], table),
        "nbytes": _int_column([o["bytes"] for o in ops]),
        "dtype": _intern([o.get("dtype", "") or "" for o in ops], table),
        "t_enter_ns": _int_column([o["t_enter_ns"] for o in ops]),
        "t_start_ns": _opt_int_column([o.get("t_start_ns") for o in ops]),
        "t_end_ns": _opt_int_column([o.get("t_end_ns") for o in ops]),
        "peer": _opt_int_column([o.get("peer") for o in ops]),
    }
    status = [o.get("status") for o in ops]
    if any(s is not None and s != "ok" for s in status):
        codes = [STATUS_CODES.get("ok" if s is None else s, -1) if isinstance(s, str) or s is None
                 else -1 for s in status]
        if min(codes) < 0:
            raise _Bad
        cols["status"] = np.asarray(codes, dtype=np.uint8)
    else:
        cols["status"] = np.zeros(len(ops), dtype=np.uint8)
    if (cols["rank"] < 0).any() or (cols["seq"] < 0).any():
        raise _Bad
    out = {name: cols[name].astype(dt, copy=False) for name, dt in OP_COLUMNS.items()}
    return Columns(out, list(table))


def _conns(conns: list[dict[str, Any]], lines: list[bytes], first: int,
           source: str) -> ConnRecords:
    try:
        return _conns_fast(conns)
    except (_Bad, KeyError, ValueError, TypeError, OverflowError):
        _explain(conns, "conn", lines, first, source)
        raise


def _conns_fast(conns: list[dict[str, Any]]) -> ConnRecords:
    table: dict[str, int] = {}
    pgs = [o.get("pg") for o in conns]
    if all(p is None for p in pgs):
        pg = np.full(len(conns), -1, dtype=np.int32)
    else:
        if not all(p is None or isinstance(p, str) for p in pgs):
            raise _Bad
        pg = np.array([-1 if p is None else table.setdefault(p, len(table)) for p in pgs],
                      dtype=np.int32)
    raw_paths = [o.get("path") for o in conns]
    paths = None
    if any(p is not None for p in raw_paths):
        if not set(map(type, raw_paths)) <= {list, type(None)}:
            raise _Bad
        paths = [tuple(p) if p else None for p in raw_paths]
        # every element of every distinct path a string: one pass in C over the elements
        distinct = [p for p in dict.fromkeys(paths) if p is not None]
        if not set(map(type, itertools.chain.from_iterable(distinct))) <= {str}:
            raise _Bad
    return ConnRecords(
        _int_column([o["src"] for o in conns]), _int_column([o["dst"] for o in conns]),
        _int_column([o["bytes"] for o in conns]), _int_column([o["t_start_ns"] for o in conns]),
        _opt_int_column([o.get("t_end_ns") for o in conns]), pg,
        _opt_int_column([o.get("seq") for o in conns]), list(table), paths)


def _explain(records: list[dict[str, Any]], kind: str, lines: list[bytes], first: int,
             source: str) -> None:
    """Find the first bad record of a batch and raise a FormatError naming its line and field."""
    wanted = iter(i for i, ln in enumerate(lines) if ln.strip() and _is_type(ln, kind))
    for o in records:
        line = first + next(wanted, 0)
        req = _OP_INT if kind == "op" else _CONN_INT
        for f in req:
            v = o.get(f)
            if not isinstance(v, int) or isinstance(v, bool) or (v < 0 and f in ("rank", "seq")):
                raise FormatError(f"{kind} record needs a non-negative integer {f!r}" if v is None
                                  else f"{kind} record field must be a non-negative integer, "
                                  f"got {v!r}", source=source, line=line, field=f)
        opt = _OP_OPT_INT if kind == "op" else ("t_end_ns", "seq")
        for f in opt:
            v = o.get(f)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise FormatError(f"{kind} record field must be an integer or null, got {v!r}",
                                  source=source, line=line, field=f)
        if kind == "op":
            for f in ("pg", "op"):
                if not isinstance(o.get(f), str):
                    raise FormatError(f"op record needs a string {f!r}", source=source,
                                      line=line, field=f)
            if o.get("dtype") is not None and not isinstance(o.get("dtype"), str):
                raise FormatError("op record field must be a string", source=source, line=line,
                                  field="dtype")
            s = o.get("status")
            if s is not None and (not isinstance(s, str) or s not in STATUS_CODES):
                raise FormatError(f"status {s!r} is not one of ok, timeout, error",
                                  source=source, line=line, field="status")
        else:
            if o.get("pg") is not None and not isinstance(o.get("pg"), str):
                raise FormatError("conn record field must be a string", source=source,
                                  line=line, field="pg")
            p = o.get("path")
            if p is not None and not (isinstance(p, list) and all(isinstance(x, str) for x in p)):
                raise FormatError("conn path must be a list of topology node ids",
                                  source=source, line=line, field="path")
    raise FormatError(f"malformed {kind} records in this block", source=source, line=first)


def _is_type(line: bytes, kind: str) -> bool:
    try:
        return orjson.loads(line).get("type") == kind
    except (orjson.JSONDecodeError, AttributeError):
        return False
