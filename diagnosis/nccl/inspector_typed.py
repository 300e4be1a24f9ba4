"""The Inspector reader's fast path: a block of lines decoded by ``msgspec`` into typed structs
in one call, then turned into columns (:class:`NcclOps`) a field at a time.

Each struct holds only the fields c4 reads, typed as NCCL writes them; msgspec skips the rest
(timing source, algorithm, ``event_trace_sn``) without building them, and refuses a line with a
required field missing or of another type. The block is refused as a whole, and read again by
the numpy scanner and the JSON path (:func:`diagnosis.nccl.inspector.parse_block`), which name
the bad line and field, when anything is not the plain case: a line that does not decode, a
blank line, a line without ``header``/``metadata`` (v4.3+ lines inherit them), ``dump_stats``
markers, a line with neither payload, an escape (``\\``), a negative number, a rank outside its
communicator, a communicator with two sizes, an id that is not a hash. So a block read here
gives exactly the rows the slower paths would. Bandwidths are read only to count the
``"nan"`` strings among them (c4 has no use for them; ``busbw`` is NaN, as the scanner leaves
it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.records import CommKey, NcclOps

__all__ = ["Decoded", "decode_block"]


class _Header(msgspec.Struct, gc=False):
    id: str
    rank: int
    n_ranks: int
    nnodes: int = 0
    comm_name: str | None = None


class _Metadata(msgspec.Struct, gc=False):
    dump_timestamp_us: int
    hostname: str
    pid: int
    inspector_output_format_version: str = ""


class _Kernel(msgspec.Struct, gc=False):
    kernel_start_ts: int = -1
    kernel_stop_ts: int = -1


class _CollTrace(msgspec.Struct, gc=False):
    start: int = msgspec.field(default=-1, name="coll_start_ts")
    kernel_events: list[_Kernel] = []


class _P2pTrace(msgspec.Struct, gc=False):
    start: int = msgspec.field(default=-1, name="p2p_start_ts")
    kernel_events: list[_Kernel] = []


class _Coll(msgspec.Struct, gc=False):
    func: str = msgspec.field(name="coll")
    sn: int = msgspec.field(name="coll_sn")
    msg: int = msgspec.field(name="coll_msg_size_bytes")
    exec_us: int | float | None = msgspec.field(default=None, name="coll_exec_time_us")
    trace: _CollTrace | None = msgspec.field(default=None, name="event_trace_ts")
    # read only to count the "nan" strings NCCL writes for them (c4 does not use them)
    algobw: float | str | None = msgspec.field(default=None, name="coll_algobw_gbs")
    busbw: float | str | None = msgspec.field(default=None, name="coll_busbw_gbs")
    peer: int = -1


class _P2p(msgspec.Struct, gc=False):
    func: str = msgspec.field(name="p2p")
    sn: int = msgspec.field(name="p2p_sn")
    peer: int = msgspec.field(name="p2p_peer")
    msg: int = msgspec.field(name="p2p_msg_size_bytes")
    exec_us: int | float | None = msgspec.field(default=None, name="p2p_exec_time_us")
    trace: _P2pTrace | None = msgspec.field(default=None, name="event_trace_ts")
    algobw: float | str | None = msgspec.field(default=None, name="p2p_algobw_gbs")
    busbw: float | str | None = msgspec.field(default=None, name="p2p_busbw_gbs")


class _Line(msgspec.Struct, gc=False):
    # kept as its bytes: a block repeats a few headers on every line, so each distinct one is
    # decoded once (:func:`_communicators`)
    header: msgspec.Raw
    metadata: _Metadata
    coll_perf: _Coll | None = None
    p2p_perf: _P2p | None = None
    dump_stats: msgspec.Raw | None = None


_DECODER = msgspec.json.Decoder(_Line)
_HEADER_DECODER = msgspec.json.Decoder(_Header)
_NL, _SPACE = 10, 32
_COLL, _P2P, _STATS, _META, _HEADER = map(attrgetter, (
    "coll_perf", "p2p_perf", "dump_stats", "metadata", "header"))
_SN, _MSG, _PEER, _EXEC, _FUNC = map(attrgetter, ("sn", "msg", "peer", "exec_us", "func"))
_DUMP, _PID, _HOST, _VERSION = map(attrgetter, (
    "dump_timestamp_us", "pid", "hostname", "inspector_output_format_version"))
_ALGOBW, _BUSBW, _ID = map(attrgetter, ("algobw", "busbw", "id"))
_TRACE, _START, _EVENTS = map(attrgetter, ("trace", "start", "kernel_events"))
_KSTART, _KSTOP = map(attrgetter, ("kernel_start_ts", "kernel_stop_ts"))


class _Refused(Exception):
    """The block is not the plain case: the caller reads it the careful way."""


@dataclass
class Decoded:
    """A block's rows, the format versions in it with the first line (0-based) of each, its
    number of lines, and the bandwidths written as strings (``"nan"``): how many, and the
    first one's line (0-based; -1: none)."""

    ops: NcclOps
    versions: list[tuple[str, int]]
    lines: int = 0
    nan: int = 0
    nan_line: int = -1


def decode_block(block: bytes, first_line: int, source: str) -> Decoded | None:
    """The rows of a block of whole lines (each ending in a newline); None where the block is
    not the plain case (the caller then reads it with the scanner and the JSON path)."""
    if not block or b"\\" in block:
        return None
    raw = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(raw == _NL)
    # a line that starts with white space may be blank, which decode_lines skips: the line
    # count would no longer say that every line held exactly one record
    if raw[0] <= _SPACE or (raw[ends[:-1] + 1] <= _SPACE).any():
        return None
    try:
        lines = _DECODER.decode_lines(block)
    except (msgspec.DecodeError, ValueError, RecursionError):    # ValueError: bad UTF-8
        return None
    if len(lines) != len(ends):            # a line held two records
        return None
    try:
        out = _columns(lines, first_line, source)
    except _Refused:
        return None
    out.lines = len(lines)
    return out


def _ints(values: Iterable[int], n: int) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=n)


def _factorize(values: list[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct values in first-seen order and each value's index among them (hashing
    each value once: strings keep their hash)."""
    n = len(values)
    if values.count(values[0]) == n:
        return [values[0]], np.zeros(n, dtype=np.int32)
    table = dict.fromkeys(values)
    for i, k in enumerate(table):
        table[k] = i
    return list(table), np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=n)


def _columns(lines: list[_Line], first_line: int, source: str) -> Decoded:
    n = len(lines)
    payload = [c or p for c, p in zip(map(_COLL, lines), map(_P2P, lines))]
    if None in payload or list(map(_STATS, lines)).count(None) != n:
        raise _Refused                     # neither coll_perf nor p2p_perf, or a marker
    meta = list(map(_META, lines))
    sn = _ints(map(_SN, payload), n)
    msg = _ints(map(_MSG, payload), n)
    peer = _ints(map(_PEER, payload), n)
    dump = _ints(map(_DUMP, meta), n)
    pids = list(map(_PID, meta))
    pid = _ints(pids, n)
    if (sn < 0).any() or (msg < 0).any() or (pid < 0).any() or (dump < 0).any():
        raise _Refused
    execs = list(map(_EXEC, payload))
    try:
        plain = type(sum(execs)) is int    # no float (sum fails on a missing time)
    except TypeError:
        plain = False
    if plain:
        exec_us = _ints(execs, n)
    else:                                  # floats rounded, missing times -1
        f = np.array([np.nan if x is None else x for x in execs], dtype=np.float64)
        exec_us = np.where(np.isnan(f), -1, np.rint(f)).astype(np.int64)

    hosts = list(map(_HOST, meta))
    if hosts.count(hosts[0]) == n and pids.count(pids[0]) == n:    # one process (the rule)
        procs, proc = [(hosts[0], pids[0])], np.zeros(n, dtype=np.int32)
    else:
        procs, proc = _factorize(list(zip(hosts, pids)))
    comms, comm = _communicators(list(map(_HEADER, lines)))
    func_table, op = _factorize(list(map(_FUNC, payload)))
    ops_named = [op_name(f) for f in func_table]
    # two spellings of one operation (AllReduce, allreduce) are one op
    ops, remap = _factorize(ops_named)
    op = remap[op] if len(ops) < len(ops_named) else op

    start, kstart, kstop = _trace_times(payload, n)
    ops_out = NcclOps(source, procs, comms, ops, proc, comm, op, sn, peer, msg, exec_us, dump,
                      start, kstart, kstop,
                      np.arange(first_line, first_line + n, dtype=np.int64),
                      np.full(n, np.nan))
    versions, vidx = _factorize(list(map(_VERSION, meta)))
    first = [int(np.argmax(vidx == j)) for j in range(len(versions))] if len(versions) > 1 \
        else [0]
    out = Decoded(ops_out, list(zip(versions, first)))
    for bw in (_ALGOBW, _BUSBW):
        kinds = list(map(type, map(bw, payload)))
        k = kinds.count(str)
        if k:
            at = kinds.index(str)
            out.nan += k
            out.nan_line = at if out.nan_line < 0 else min(out.nan_line, at)
    return out


def _communicators(headers: list[msgspec.Raw]) -> tuple[list[CommKey], np.ndarray]:
    """The communicators of the lines' headers, and each line's: lines grouped by the bytes of
    their header, each distinct header decoded once; headers that spell one communicator two
    ways (``0x1`` and ``1``, keys in another order) are one, and one communicator with two
    sizes is refused (the slower paths read it)."""
    whole, idx = _factorize(list(map(bytes, headers)))
    try:
        table = [_HEADER_DECODER.decode(h) for h in whole]
    except (msgspec.DecodeError, ValueError, RecursionError):
        raise _Refused from None
    keys = [_comm(h) for h in table]
    merged, remap = _factorize(keys)
    if len({(c.hash, c.rank, c.name) for c in merged}) != len(merged):
        raise _Refused
    return merged, (remap[idx] if len(merged) < len(keys) else idx)


def _comm(h: _Header) -> CommKey:
    if not 0 <= h.rank < max(h.n_ranks, 1):
        raise _Refused
    try:
        hsh = comm_hash(h.id)
    except ValueError:
        raise _Refused from None
    name = h.comm_name
    return CommKey(hsh, h.rank, h.n_ranks, h.nnodes,
                   name if name and name != "unknown" else None)


def _trace_times(payload: list[_Coll | _P2p], n: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line the call's start, its first kernel start and last kernel stop (verbose
    output); -1 where the line has none. Times that are not positive count as absent."""
    none = np.full(n, -1, dtype=np.int64)
    traces = list(map(_TRACE, payload))
    if traces.count(None) == n:
        return none, none.copy(), none.copy()
    if None in traces:
        rows = np.flatnonzero(np.fromiter(map(_is_none, traces), dtype=bool, count=n) ^ True)
        traces = [t for t in traces if t is not None]
    else:
        rows = np.arange(n)
    m = len(traces)
    start = none.copy()
    start[rows] = _ints(map(_START, traces), m)
    events = list(map(_EVENTS, traces))
    counts = np.fromiter(map(len, events), dtype=np.int64, count=m)
    flat = list(chain.from_iterable(events))
    ks = _ints(map(_KSTART, flat), len(flat))
    ke = _ints(map(_KSTOP, flat), len(flat))
    big = np.iinfo(np.int64).max
    kstart, kstop = none.copy(), none.copy()
    nonempty = counts > 0
    if nonempty.any():
        at = (np.cumsum(counts) - counts)[nonempty]
        lo = np.minimum.reduceat(np.where(ks > 0, ks, big), at)
        hi = np.maximum.reduceat(np.where(ke > 0, ke, -1), at)
        kstart[rows[nonempty]] = np.where(lo != big, lo, -1)
        kstop[rows[nonempty]] = hi
    start[start <= 0] = -1
    return start, kstart, kstop


def _is_none(x: object) -> bool:
    return x is None
