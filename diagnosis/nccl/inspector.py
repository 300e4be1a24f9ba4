"""NCCL Inspector JSON lines: one completed collective (``coll_perf``) or point-to-point
operation (``p2p_perf``) per line, per rank and communicator.

The file is ``<dir>/<hostname>-pid<pid>.log`` (one per process, every communicator of it);
``.jsonl`` and gzip (``.gz``) are read too. Lines are read in blocks, each parsed in one
``orjson`` call and turned into columns (:class:`NcclOps`), so a block costs no Python
loop per field. What the lines hold and which traps they set is in the package README; the
reader:

* takes format versions ``v3.*`` and ``v4.*`` (the version string does not say which fields a
  line has: NCCL 2.30 added ``comm_name`` and ``p2p_perf`` and still writes ``v4.0``), and any
  other version with a warning, dispatching on whichever of ``coll_perf``/``p2p_perf`` is there;
* reads the unmerged v4.1+ variants: ``dump_stats`` markers (their drop counts are kept) and,
  from v4.3, lines without ``header``/``metadata`` that inherit them from the line before;
  ``proxy_trace`` records are skipped;
* reads ``"nan"`` bandwidths as NaN, the verbose ``event_trace_ts`` times when present;
* skips a line it cannot read (truncated, not JSON, a field of the wrong type) with a warning
  naming the file and line (:class:`~diagnosis.nccl.problems.Problems`), and reads on.

Times: ``dump_timestamp_us`` is when the line was written, not when the operation ran. With
verbose output the kernel's stop (``kernel_stop_ts``, the latest channel) is the end, and the end
minus ``*_exec_time_us`` (GPU-timed) the rank's arrival; without it the end is the dump time (an
upper bound, late by up to the dump interval).
"""

from __future__ import annotations

import gzip
import io
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.inspector_fast import scan_block
from diagnosis.nccl.inspector_typed import decode_block
from diagnosis.nccl.pretty import json_documents
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import CommKey, DumpStats, NcclOps, OpRecord
from diagnosis.trace.columns import Bad

log = logging.getLogger(__name__)

__all__ = ["LineReader", "find_inspector_files", "parse_block", "parse_lines", "parse_records",
           "read_inspector_file"]

#: format major versions whose fields this reader knows (others are read with a warning)
KNOWN_MAJORS = ("v3", "v4")
#: file name endings of Inspector JSON output (the bundled exporter's list)
SUFFIXES = (".log", ".log.gz", ".jsonl", ".jsonl.gz")
_PAYLOADS = ("coll_perf", "p2p_perf")
_NONE = -1
_NEWLINE = ord("\n")
_TAIL = 64 << 10              # where a block's last line is looked for first
_NAN = 'a bandwidth written as the string "nan": read as not a number'


# ----- parsing -------------------------------------------------------------------------------
class _Context:
    """The header and metadata in force (v4.3+ lines without them inherit the last ones)."""

    __slots__ = ("header", "last_line", "metadata", "unknown_versions")

    def __init__(self) -> None:
        self.header: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None
        self.unknown_versions: set[str] = set()
        self.last_line: bytes | None = None      # the previous block's last line


def parse_block(block: bytes, first_line: int, source: str,
                problems: Problems | None = None, context: _Context | None = None) -> NcclOps:
    """The records of whole lines (``block`` ends with a newline; ``first_line`` is the number
    of its first line): typed structs (:mod:`diagnosis.nccl.inspector_typed`) read a block of
    plain lines; a block they refuse, the scanner (:mod:`diagnosis.nccl.inspector_fast`) reads
    its compact lines and the JSON path the rest; rows in file order."""
    return _parse_block(block, first_line, source, problems, context)[0]


def _parse_block(block: bytes | memoryview, first_line: int, source: str,
                 problems: Problems | None, context: _Context | None) -> tuple[NcclOps, int]:
    """:func:`parse_block`, and the number of lines in the block."""
    problems = problems if problems is not None else Problems()
    ctx = context if context is not None else _Context()
    typed = decode_block(block, first_line, source)
    if typed is not None:
        for v, at in typed.versions:
            _check_version(v, source, first_line + at, problems, ctx)
        if typed.nan:
            problems.add(source, first_line + typed.nan_line, "nan", _NAN)
            problems.counts["nan"] += typed.nan - 1
        ctx.last_line = _last_line(block)
        return typed.ops, typed.lines
    block = bytes(block)                   # the careful paths read bytes (a copy of a view)
    try:
        ops, bad, versions = scan_block(block, first_line, source)
    except ValueError:
        ops, bad, versions = NcclOps.empty(source), None, []
    for v, at in versions:
        _check_version(v, source, first_line + at, problems, ctx)
    lines = block.split(b"\n")[:-1]
    if bad is None:
        bad = np.arange(len(lines))
    if b'"nan"' in block:
        _note_nan(block, bad, first_line, source, problems)
    if len(bad):
        recs: list[OpRecord] = []
        stats: list[DumpStats] = []
        bad_set = set(bad.tolist())
        for i in bad.tolist():
            if i > 0 and i - 1 not in bad_set:
                _context_from(lines[i - 1], ctx)      # a v4.3+ line inherits header/metadata
            elif i == 0 and ctx.last_line is not None:
                _context_from(ctx.last_line, ctx)
            ln = lines[i]
            if not ln.strip():
                continue
            try:
                o = orjson.loads(ln)
            except orjson.JSONDecodeError:
                problems.add(source, first_line + i, "bad_line", "not a JSON object (a "
                             "truncated line?): skipped; the lines after it are read")
                continue
            _one(o, first_line + i, source, problems, ctx, recs, stats)
        slow = NcclOps.from_records(recs, source, stats)
        ops = NcclOps.concat([ops, slow], source).in_line_order()
    if lines:
        ctx.last_line = lines[-1]
    return ops, len(lines)


def _last_line(block: bytes | memoryview) -> bytes:
    """The last line of a block of whole lines, without its newline."""
    if isinstance(block, bytes):
        return block[block.rfind(b"\n", 0, len(block) - 1) + 1:-1]
    tail = bytes(block[-_TAIL:])
    at = tail.rfind(b"\n", 0, len(tail) - 1)
    if at < 0 and len(tail) < len(block):          # a last line longer than the tail
        tail = bytes(block)
        at = tail.rfind(b"\n", 0, len(tail) - 1)
    return tail[at + 1:-1]


def _note_nan(block: bytes, bad: np.ndarray, first_line: int, source: str,
              problems: Problems) -> None:
    """Notes the ``"nan"`` strings of scanned lines (the scanner does not read bandwidths, so
    it would not see them; the JSON path notes its own lines): the first with its line, the
    rest counted (a point-to-point call of no measurable time writes two)."""
    at = block.find(b'"nan"')
    i = block.count(b"\n", 0, at)
    if i in set(bad.tolist()):
        return
    problems.add(source, first_line + i, "nan", _NAN)
    problems.counts["nan"] += block.count(b'"nan"') - 1


def _context_from(line: bytes, ctx: _Context) -> None:
    try:
        o = orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    if isinstance(o, dict):
        if isinstance(o.get("header"), dict):
            ctx.header = o["header"]
        if isinstance(o.get("metadata"), dict):
            ctx.metadata = o["metadata"]


def parse_lines(lines: list[bytes], first_line: int, source: str,
                problems: Problems | None = None,
                context: _Context | None = None) -> NcclOps:
    """The records of consecutive lines, every line through the JSON path (the reference the
    scanner is tested against). Blank lines are skipped; a line that cannot be read is
    skipped with a problem noted."""
    recs, stats = parse_records(lines, first_line, source, problems, context)
    return NcclOps.from_records(recs, source, stats)


def parse_records(lines: list[bytes], first_line: int, source: str,
                  problems: Problems | None = None, context: _Context | None = None
                  ) -> tuple[list[OpRecord], list[DumpStats]]:
    """The records and ``dump_stats`` markers of consecutive lines, one line at a time (every
    field kept); a line that cannot be read is skipped with a problem noted."""
    problems = problems if problems is not None else Problems()
    ctx = context if context is not None else _Context()
    recs: list[OpRecord] = []
    stats: list[DumpStats] = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        n = first_line + i
        try:
            o = orjson.loads(ln)
        except orjson.JSONDecodeError:
            problems.add(source, n, "bad_line", "not a JSON object (a truncated line?): "
                         "skipped; the lines after it are read")
            continue
        _one(o, n, source, problems, ctx, recs, stats)
    return recs, stats


def _trace_times(t: Any) -> tuple[int, int, int]:
    if not isinstance(t, dict):
        raise Bad
    s = t.get("coll_start_ts", t.get("p2p_start_ts"))
    starts = [k.get("kernel_start_ts") for k in t.get("kernel_events") or ()]
    stops = [k.get("kernel_stop_ts") for k in t.get("kernel_events") or ()]
    starts = [x for x in starts if isinstance(x, int) and x > 0]
    stops = [x for x in stops if isinstance(x, int) and x > 0]
    return (s if isinstance(s, int) and s > 0 else _NONE, min(starts) if starts else _NONE,
            max(stops) if stops else _NONE)


def _comm(h: dict[str, Any]) -> CommKey:
    name = h.get("comm_name")
    rank, nranks, nnodes = h["rank"], h["n_ranks"], h.get("nnodes", 0)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (rank, nranks, nnodes)):
        raise Bad
    if not 0 <= rank < max(nranks, 1):
        raise Bad
    try:
        hsh = comm_hash(h["id"])
    except ValueError:
        raise Bad from None
    return CommKey(hsh, rank, nranks, nnodes,
                   name if isinstance(name, str) and name and name != "unknown" else None)


def _check_version(v: Any, source: str, line: int, problems: Problems, ctx: _Context) -> None:
    if isinstance(v, str) and v.split(".")[0] in KNOWN_MAJORS:
        return
    key = repr(v)
    if key not in ctx.unknown_versions:
        ctx.unknown_versions.add(key)
        problems.add(source, line, "unknown_version",
                     f"inspector_output_format_version {v!r} is not one this c4 knows "
                     f"({', '.join(m + '.x' for m in KNOWN_MAJORS)}): its coll_perf/p2p_perf "
                     "fields are read as v4's")


def _one(o: Any, n: int, source: str, problems: Problems, ctx: _Context,
         recs: list[OpRecord], stats: list[DumpStats]) -> None:
    """One parsed line on the slow path: a record, a marker, or a problem noted."""
    if not isinstance(o, dict):
        problems.add(source, n, "bad_line", "not a JSON object: skipped")
        return
    if isinstance(o.get("header"), dict):
        ctx.header = o["header"]
    if isinstance(o.get("metadata"), dict):
        ctx.metadata = o["metadata"]
    if "dump_stats" in o:
        stats.append(_stats(o["dump_stats"], n, source, ctx))
        return
    kind = next((k for k in _PAYLOADS if k in o), None)
    if kind is None:
        if "proxy_trace" not in o:
            problems.add(source, n, "unknown_record", "a line with neither coll_perf nor "
                         f"p2p_perf (keys {', '.join(sorted(o)) or 'none'}): skipped")
        return
    if ctx.header is None or ctx.metadata is None:
        problems.add(source, n, "no_header", f"a {kind} line without header/metadata and no "
                     "earlier line to take them from: skipped")
        return
    try:
        rec = _record(o[kind], kind == "p2p_perf", ctx, source, n, problems)
    except (Bad, KeyError, TypeError, ValueError) as exc:
        what = f"field {exc.args[0]!r} missing" if isinstance(exc, KeyError) else \
            "a field of the wrong type"
        problems.add(source, n, "bad_field", f"{kind} line with {what}: skipped")
        return
    recs.append(rec)


def _record(p: dict[str, Any], p2p: bool, ctx: _Context, source: str, n: int,
            problems: Problems) -> OpRecord:
    h, m = ctx.header, ctx.metadata
    assert h is not None and m is not None
    version = m.get("inspector_output_format_version", "")
    _check_version(version, source, n, problems, ctx)
    pre = "p2p" if p2p else "coll"
    func = p["p2p" if p2p else "coll"]
    sn, msg = p[f"{pre}_sn"], p[f"{pre}_msg_size_bytes"]
    exe = p.get(f"{pre}_exec_time_us")
    host, pid, dump = m["hostname"], m["pid"], m["dump_timestamp_us"]
    for v in (sn, msg, pid, dump):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise Bad
    if not isinstance(func, str) or not isinstance(host, str):
        raise Bad
    if exe is not None:
        if not isinstance(exe, (int, float)) or isinstance(exe, bool) or not math.isfinite(exe):
            raise Bad
        exe = round(exe)
    peer = p["p2p_peer"] if p2p else _NONE
    if not isinstance(peer, int):
        raise Bad
    bw = {}
    for k in ("algobw", "busbw"):
        v = p.get(f"{pre}_{k}_gbs")
        if isinstance(v, str):
            problems.add(source, n, "nan", f'bandwidth written as the string {v!r}: read as '
                         "not a number")
        try:
            bw[k] = math.nan if v is None else float(v)
        except ValueError:
            bw[k] = math.nan
    s = ks = ke = None
    if p.get("event_trace_ts") is not None:      # null: no verbose times, as absent
        a, b, c = _trace_times(p["event_trace_ts"])
        s, ks, ke = (None if x < 0 else x for x in (a, b, c))
    try:
        comm = _comm(h)
    except (Bad, KeyError):
        raise Bad from None
    return OpRecord(source, n, comm, host, pid, version if isinstance(version, str) else "",
                           dump, op_name(func), func, sn, peer, msg, exe,
                           p.get(f"{pre}_timing_source"), bw["algobw"], bw["busbw"], s, ks, ke)


def _stats(d: Any, n: int, source: str, ctx: _Context) -> DumpStats:
    m = ctx.metadata or {}
    d = d if isinstance(d, dict) else {}
    dropped = sum(v for k, v in d.items()
                  if k.endswith("_dropped_since_last_dump") and isinstance(v, int))
    return DumpStats(source, n, str(m.get("hostname", "")), int(m.get("pid", -1) or -1),
                     int(m.get("dump_timestamp_us", 0) or 0), dropped, dict(d))


# ----- files -----------------------------------------------------------------------------------
def find_inspector_files(root: str | Path) -> list[Path]:
    """The Inspector JSON files under ``root`` (recursively), in name order."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES)
                  and not p.name.startswith("."))


def _open(path: Path) -> io.BufferedIOBase:
    raw = open(path, "rb")  # noqa: SIM115 - handed to the caller, closed there
    if path.name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    return raw


def read_inspector_file(path: str | Path, *, problems: Problems | None = None,
                        block_bytes: int = 1 << 20) -> Iterator[NcclOps]:
    """Every record of one Inspector file, a block of lines at a time. A last line without its
    newline (the process died mid-write) is noted and skipped."""
    path = Path(path)
    problems = problems if problems is not None else Problems()
    pretty = _pretty(path, problems)
    if pretty is not None:
        if len(pretty) or pretty.stats:
            yield pretty
        return
    reader = LineReader(str(path), problems)
    # read into one buffer, kept for the whole file: a new buffer per block would cost a page
    # fault per 4 KiB, more than reading the block
    buf = bytearray(block_bytes)
    view = memoryview(buf)
    kept = 0                                 # a partial line at the buffer's start
    try:
        with _open(path) as fh:
            while True:
                got = fh.readinto(view[kept:])
                if not got:
                    break
                end = kept + got
                cut = buf.rfind(b"\n", 0, end) + 1
                if not cut:                  # one line longer than the buffer: a bigger one
                    view.release()
                    buf += bytes(len(buf))
                    view, kept = memoryview(buf), end
                    continue
                batch = reader.feed_lines(view[:cut])
                if len(batch) or batch.stats:
                    yield batch
                view[:end - cut] = buf[cut:end]
                kept = end - cut
    except (OSError, EOFError) as exc:   # a gzip file cut short
        problems.add(str(path), reader.line, "truncated_file",
                     f"the file ends early ({exc}): read up to here")
    reader.partial = bytes(view[:kept])
    reader.finish()


def _pretty(path: Path, problems: Problems) -> NcclOps | None:
    """A file of pretty-printed records (documentation samples, a ``jq .`` of a dump): read as
    JSON documents one after the other; None for JSON lines."""
    with _open(path) as fh:
        head = fh.read(64)
    if not head.lstrip().startswith(b"{") or head.lstrip()[1:].lstrip()[:1] not in (b'"', b"}"):
        return None
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if first != b"{":
        return None
    with _open(path) as fh:
        text = fh.read().decode("utf-8", "replace")
    ctx = _Context()
    recs: list[OpRecord] = []
    stats: list[DumpStats] = []
    for line, obj in json_documents(text, str(path), problems):
        _one(obj, line, str(path), problems, ctx, recs, stats)
    return NcclOps.from_records(recs, str(path), stats)


class LineReader:
    """Turns the bytes of one file, fed as they come, into batches of whole lines. Keeps the
    partial last line for the next feed and the header/metadata context of v4.3+ lines; also
    what the follower uses (diagnosis.nccl.follow)."""

    def __init__(self, source: str, problems: Problems) -> None:
        self.source = source
        self.problems = problems
        self.line = 1                 # number of the next whole line
        self.partial = b""
        self.context = _Context()

    def feed(self, data: bytes) -> NcclOps:
        data = self.partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self.partial = data
            return NcclOps.empty(self.source)
        self.partial = data[cut + 1:]
        ops, n = _parse_block(data[:cut + 1], self.line, self.source, self.problems,
                              self.context)
        self.line += n
        return ops

    def feed_lines(self, block: bytes | memoryview) -> NcclOps:
        """Whole lines (``block`` ends with a newline), read without a copy where the typed
        path takes them; what :meth:`feed` keeps of a partial line is read first."""
        if self.partial:
            return self.feed(bytes(block))
        ops, n = _parse_block(block, self.line, self.source, self.problems, self.context)
        self.line += n
        return ops

    def finish(self) -> None:
        """The end of the file: a partial last line is a truncated record."""
        if self.partial.strip():
            self.problems.add(self.source, self.line, "truncated_line",
                              "the last line has no newline (the process died while writing "
                              "it?): skipped")
        self.partial = b""

