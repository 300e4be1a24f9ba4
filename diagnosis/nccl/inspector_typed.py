"""The Inspector reader's fast path: a block of lines decoded by ``msgspec`` into typed structs
in one call, then turned into columns (:class:`NcclOps`) a field at a time.

The block is decoded as one JSON array whose items are its lines, so a line that is not
exactly one JSON value fails the decode; the fields are gathered with list comprehensions
(Python reads a struct's slot faster in one than through ``operator.attrgetter``), and a
value that repeats (a communicator's header over a run of its calls, the process's
metadata) is looked at once.

Each struct holds only the fields c4 reads, typed as NCCL writes them; msgspec skips the rest
(timing source, algorithm, ``event_trace_sn``) without building them, and refuses a line with a
required field missing or of another type. The block is refused as a whole, and read again by
the numpy scanner and the JSON path (:func:`diagnosis.nccl.inspector.parse_block`), which name
the bad line and field, when anything is not the plain case: a line that does not decode (a
blank line, a record cut short or spread over two lines), a line without
``header``/``metadata`` (v4.3+ lines inherit them), ``dump_stats`` markers, a line with neither
payload, an escape (``\\``), a negative number, a rank outside its communicator, a
communicator with two sizes, an id that is not a hash. So a block read here gives exactly the
rows the slower paths would. Bandwidths are not read (c4 has no use for them; ``busbw`` is NaN,
as the scanner leaves it): the ``"nan"`` strings NCCL writes for them are counted in the block's
bytes.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from operator import ne
from typing import Any, cast

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
    peer: int = -1


class _P2p(msgspec.Struct, gc=False):
    func: str = msgspec.field(name="p2p")
    sn: int = msgspec.field(name="p2p_sn")
    peer: int = msgspec.field(name="p2p_peer")
    msg: int = msgspec.field(name="p2p_msg_size_bytes")
    exec_us: int | float | None = msgspec.field(default=None, name="p2p_exec_time_us")
    trace: _P2pTrace | None = msgspec.field(default=None, name="event_trace_ts")


class _Marker:
    """No JSON value decodes to this type (:func:`_refuse`): a line with a field of it makes
    the block not plain, at no cost per line for the blocks without one."""


def _refuse(kind: type, value: Any) -> Any:
    raise ValueError(f"a {kind.__name__} field: read the block the careful way")


class _Line(msgspec.Struct, gc=False):
    # kept as its bytes: a block repeats a few headers on every line, so each distinct one is
    # decoded once (:func:`_communicators`)
    header: msgspec.Raw
    metadata: _Metadata
    coll_perf: _Coll | None = None
    p2p_perf: _P2p | None = None
    # v4.1+ markers of drops: the JSON path keeps their counts
    dump_stats: _Marker = None  # type: ignore[assignment]  # absent: None


_DECODER = msgspec.json.Decoder(list[_Line], dec_hook=_refuse)
_HEADER_DECODER = msgspec.json.Decoder(_Header)


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


def decode_block(block: bytes | memoryview, first_line: int, source: str) -> Decoded | None:
    """The rows of a block of whole lines (each ending in a newline); None where the block is
    not the plain case (the caller then reads it with the scanner and the JSON path)."""
    if not len(block):
        return None
    # the lines as the items of one JSON array: a line that is not exactly one JSON value (a
    # blank line, a record cut short or spread over two lines, two records on one line) does
    # not decode, which makes the item count the line count
    array = _SCRATCH.as_array(block)
    if array is None:
        return None
    try:
        lines = _DECODER.decode(array)
    except (msgspec.DecodeError, ValueError, RecursionError):    # ValueError: bad UTF-8
        return None
    if not lines:
        return None
    try:
        out = _columns(lines, first_line, source)
    except _Refused:
        return None
    out.lines = len(lines)
    # the bandwidths written as strings, found in the bytes: a scan of the block costs less
    # than reading two fields of every line that c4 has no use for
    first = _BW_STRING.search(block)
    if first is not None:
        at = first.start()
        out.nan = len(_BW_STRING.findall(block, at))
        out.nan_line = int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8, count=at)
                                            == _NEWLINE))
    return out


class _Scratch(threading.local):
    """Where a block is rewritten as a JSON array, kept from block to block (one per thread):
    new buffers of a block's size cost a page fault per 4 KiB each time (the allocator gives
    freed ones back to the system), more than rewriting the block itself."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.u8 = np.zeros(0, dtype=np.uint8)
        self.mask = np.zeros(0, dtype=bool)

    def as_array(self, block: bytes | memoryview) -> memoryview | None:
        """``[`` + the lines joined by commas + ``]``, in the scratch buffer (valid until the
        next call); None where the block holds an escape (``\\``)."""
        size = len(block) + 1
        if len(self.buf) < size:
            del self.u8                    # its view of the old buffer
            self.buf = bytearray(max(size, 2 * len(self.buf)))
            self.u8 = np.frombuffer(self.buf, dtype=np.uint8)
            self.mask = np.empty(len(self.buf), dtype=bool)
        self.buf[0] = _OPEN
        self.buf[1:size] = block
        if self.buf.find(_ESCAPE, 1, size) >= 0:
            return None
        body, mask = self.u8[1:size], self.mask[:size - 1]
        np.equal(body, _NEWLINE, out=mask)
        np.copyto(body, _COMMA, where=mask)
        self.buf[size - 1] = _CLOSE        # the last line's newline
        return memoryview(self.buf)[:size]


_SCRATCH = _Scratch()
# a bandwidth's value that is a string ("nan"): NCCL writes its four bandwidth keys so
_BW_STRING = re.compile(rb'bw_gbs"\s*:\s*"')
_OPEN, _CLOSE, _COMMA, _NEWLINE, _ESCAPE = b"[],\n\\"


def _ints(values: list[int]) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=len(values))


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
    # a line with both is read as its coll_perf, as the JSON path does
    found = [ln.coll_perf or ln.p2p_perf for ln in lines]
    if None in found:                      # neither coll_perf nor p2p_perf
        raise _Refused
    payload = cast("list[_Coll | _P2p]", found)
    meta = [ln.metadata for ln in lines]
    sn = _ints([p.sn for p in payload])
    msg = _ints([p.msg for p in payload])
    peer = _ints([p.peer for p in payload])
    dump = _ints([m.dump_timestamp_us for m in meta])
    if (sn < 0).any() or (msg < 0).any() or (dump < 0).any():
        raise _Refused
    execs: list[Any] = [p.exec_us for p in payload]
    try:
        plain = type(sum(execs)) is int    # no float (sum fails on a missing time)
    except TypeError:
        plain = False
    if plain:
        exec_us = _ints(execs)
    else:                                  # floats rounded, missing times -1
        f = np.array([np.nan if x is None else x for x in execs], dtype=np.float64)
        exec_us = np.where(np.isnan(f), -1, np.rint(f)).astype(np.int64)

    procs, proc, versions = _processes(meta)
    comms, comm = _communicators([ln.header for ln in lines])
    func_table, op = _factorize([p.func for p in payload])
    ops_named = [op_name(f) for f in func_table]
    # two spellings of one operation (AllReduce, allreduce) are one op
    ops, remap = _factorize(ops_named)
    op = remap[op] if len(ops) < len(ops_named) else op

    start, kstart, kstop = _trace_times([p.trace for p in payload])
    ops_out = NcclOps(source, procs, comms, ops, proc, comm, op, sn, peer, msg, exec_us, dump,
                      start, kstart, kstop,
                      np.arange(first_line, first_line + n, dtype=np.int64),
                      np.full(n, np.nan))
    return Decoded(ops_out, versions)


def _processes(meta: list[_Metadata]
               ) -> tuple[list[tuple[str, int]], np.ndarray, list[tuple[str, int]]]:
    """The processes (hostname, pid) of the lines' metadata and each line's, and the format
    versions with the first line of each. A file is one process writing one version, which
    one comparison per line and field confirms; otherwise each distinct (host, pid,
    version) is looked at once."""
    n = len(meta)
    hosts = [m.hostname for m in meta]
    pids = [m.pid for m in meta]
    versions = [m.inspector_output_format_version for m in meta]
    if hosts.count(hosts[0]) == n and pids.count(pids[0]) == n and \
            versions.count(versions[0]) == n:
        if pids[0] < 0:
            raise _Refused
        return [(hosts[0], pids[0])], np.zeros(n, dtype=np.int32), [(versions[0], 0)]
    table, idx = _factorize(list(zip(hosts, pids, versions)))
    if any(pid < 0 for _, pid, _ in table):
        raise _Refused
    procs, proc_of = _factorize([(host, pid) for host, pid, _ in table])
    names, version_of = _factorize([version for _, _, version in table])
    _, first = np.unique(idx, return_index=True)        # each distinct triple's first line
    first_of_version = [int(first[version_of == v].min()) for v in range(len(names))]
    return procs, proc_of[idx], list(zip(names, first_of_version))


def _communicators(headers: list[msgspec.Raw]) -> tuple[list[CommKey], np.ndarray]:
    """The communicators of the lines' headers, and each line's. NCCL writes a communicator's
    calls one after the other, so lines are taken in runs of one header (its bytes), and each
    distinct header is decoded once; headers that spell one communicator two ways (``0x1``
    and ``1``, keys in another order) are one, and one communicator with two sizes is refused
    (the slower paths read it)."""
    n = len(headers)
    starts = np.flatnonzero(np.fromiter(map(ne, headers, [None, *headers]), dtype=bool,
                                        count=n))
    if len(starts) * 2 > n:                # runs too short to pay: every line's header
        whole, idx = _factorize([bytes(h) for h in headers])
    else:
        whole, run = _factorize([bytes(headers[i]) for i in starts.tolist()])
        ends = np.empty_like(starts)
        ends[:-1] = starts[1:]
        ends[-1] = n
        idx = np.repeat(run, ends - starts)
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


def _trace_times(traces: list[_CollTrace | _P2pTrace | None]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line the call's start, its first kernel start and last kernel stop (verbose
    output); -1 where the line has none. Times that are not positive count as absent."""
    n = len(traces)
    none = np.full(n, -1, dtype=np.int64)
    absent = traces.count(None)
    if absent == n:
        return none, none.copy(), none.copy()
    rows = None
    if absent:
        rows = np.flatnonzero(np.fromiter([t is not None for t in traces], dtype=bool,
                                          count=n))
        present = [t for t in traces if t is not None]
    else:
        present = cast("list[_CollTrace | _P2pTrace]", traces)
    start = _ints([t.start for t in present])
    events = [t.kernel_events for t in present]
    counts = np.fromiter(map(len, events), dtype=np.int64, count=len(events))
    ks = _ints([k.kernel_start_ts for ev in events for k in ev])
    ke = _ints([k.kernel_stop_ts for ev in events for k in ev])
    if len(ks) == len(present) and (counts == 1).all():     # one kernel channel each
        kstart = np.where(ks > 0, ks, -1)
        kstop = np.where(ke > 0, ke, -1)
    else:
        big = np.iinfo(np.int64).max
        kstart, kstop = np.full_like(start, -1), np.full_like(start, -1)
        nonempty = counts > 0
        if nonempty.any():
            at = (np.cumsum(counts) - counts)[nonempty]
            lo = np.minimum.reduceat(np.where(ks > 0, ks, big), at)
            hi = np.maximum.reduceat(np.where(ke > 0, ke, -1), at)
            kstart[nonempty] = np.where(lo != big, lo, -1)
            kstop[nonempty] = hi
    start[start <= 0] = -1
    if rows is None:
        return start, kstart, kstop
    out = none.copy(), none.copy(), none
    for col, vals in zip(out, (start, kstart, kstop)):
        col[rows] = vals
    return out
