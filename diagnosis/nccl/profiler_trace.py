"""The example profiler plugin's Chrome trace (``NCCL_PROFILE_DUMP_FILE``), read leniently.

The plugin writes ``<prefix>_<commHash decimal>_<rank>.json`` at finalize: a ``[`` line, one
async event per line (``"ph": "b"`` or ``"e"``, each ending in ``},``) and a closing ``{}]``.
Older builds printed ``datatype`` and ``Stream`` unquoted (``ncclFloat32``, ``0x5020…``), the
README's sample has a curly quote and a ``... [ trace truncated ]`` line: none of that is JSON.
Each line is read on its own, mended where a plugin or an editor broke it (bare identifiers and
hex numbers quoted, curly quotes straightened), and skipped with a warning when it cannot be.

Begin and end events pair on (category, name, id). ``ts`` is µs since the plugin started, on
the process's steady clock; the ``KernelCh`` events also carry the GPU's global timer (ns,
close to wall-clock time), which anchors the steady clock: each process's offset is the median
of (GPU start - ``ts``) over its kernel events. Collectives (``COLL``) carry NCCL's per-type
``SeqNum``, the communicator's hash (decimal) and the rank; their kernels and proxy transfers
follow them in the file and are given to the collective or point-to-point call before them.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import CommKey, NcclOps, OpRecord

__all__ = ["ProfilerCall", "ProfilerTrace", "ProfilerTransfer", "Span", "parse_trace",
           "read_trace_file"]

_BARE = re.compile(r'(:\s*)(0x[0-9a-fA-F]+|[A-Za-z_][A-Za-z0-9_]*)(\s*[,}])')
_JSON_WORDS = frozenset({"true", "false", "null"})
_NAME = re.compile(r"_(\d+)_(\d+)\.json$")


@dataclass(frozen=True)
class Span:
    """A begin event and its end (``end_us`` None when the trace has no end for it)."""

    cat: str
    name: str
    id: int
    pid: int
    begin_us: float
    end_us: float | None
    args: dict[str, Any]
    line: int


@dataclass(frozen=True)
class ProfilerTransfer:
    """A proxy operation (``ProgressSend``/``ProgressRecv``) on one channel to one peer."""

    send: bool
    channel: int
    peer: int
    steps: int
    chunk: int
    nbytes: int
    begin_us: float
    end_us: float | None


@dataclass(frozen=True)
class ProfilerCall:
    """A collective (``COLL``) or point-to-point call (``P2P``) with its kernels and transfers.
    ``kernel_start_ns``/``kernel_stop_ns``: the GPU timer's earliest start and latest stop over
    its channels (None when the trace has none, or a stop of 0: the kernel never finished)."""

    span: Span
    comm: int
    rank: int
    op: str
    sn: int | None
    peer: int
    count: int
    datatype: str
    kernel_start_ns: int | None = None
    kernel_stop_ns: int | None = None
    transfers: tuple[ProfilerTransfer, ...] = ()


@dataclass
class ProfilerTrace:
    """The spans of one trace file, its calls, and the steady-clock anchor per process (µs to
    add to ``ts`` for wall-clock time; None without a kernel event to anchor it)."""

    source: str
    spans: list[Span] = field(default_factory=list)
    calls: list[ProfilerCall] = field(default_factory=list)
    offset_us: dict[int, float | None] = field(default_factory=dict)
    unmatched: int = 0

    def ops(self, nranks: int = 0) -> NcclOps:
        """The calls as operation rows, on the wall clock (calls of a process without an
        anchor are left out: their times cannot be placed next to other processes')."""
        recs = []
        sizes = {"ncclFloat32": 4, "ncclFloat": 4, "ncclFloat16": 2, "ncclHalf": 2,
                 "ncclBfloat16": 2, "ncclFloat64": 8, "ncclDouble": 8, "ncclInt32": 4,
                 "ncclInt": 4, "ncclUint32": 4, "ncclInt64": 8, "ncclUint64": 8, "ncclInt8": 1,
                 "ncclChar": 1, "ncclUint8": 1, "ncclFloat8e4m3": 1, "ncclFloat8e5m2": 1}
        for c in self.calls:
            off = self.offset_us.get(c.span.pid)
            if off is None or (c.sn is None and c.peer < 0):
                continue
            start = round(c.span.begin_us + off)
            ks = None if c.kernel_start_ns is None else c.kernel_start_ns // 1000
            ke = None if c.kernel_stop_ns is None else c.kernel_stop_ns // 1000
            recs.append(OpRecord(
                self.source, c.span.line, CommKey(c.comm, c.rank, nranks), "", c.span.pid,
                "", ke if ke is not None else -1, c.op, c.span.name,
                c.sn if c.sn is not None else 0, c.peer, c.count * sizes.get(c.datatype, 1),
                None if ks is None or ke is None else ke - ks, "kernel_gpu", math.nan,
                math.nan, start, ks, ke))
        # calls that never finished have no end: they are not operations the rows can hold
        return NcclOps.from_records([r for r in recs if r.kernel_stop_us is not None],
                                    self.source)


def _mend(line: str) -> str:
    s = line.strip().replace("\u201c", '"').replace("\u201d", '"')
    if s.endswith(","):
        s = s[:-1]

    def quote(m: re.Match) -> str:
        word = m.group(2)
        if word in _JSON_WORDS:
            return m.group(0)
        return f'{m.group(1)}"{word}"{m.group(3)}'

    return _BARE.sub(quote, s)


def parse_trace(text: str, source: str = "", problems: Problems | None = None) -> ProfilerTrace:
    """The spans and calls of one trace's text."""
    problems = problems if problems is not None else Problems()
    events: list[tuple[int, dict[str, Any]]] = []
    for no, raw in enumerate(text.split("\n"), 1):
        s = raw.strip()
        if s in ("", "[", "]", "{}]", "{}", "[{}]") or s.startswith("..."):
            continue
        try:
            ev = orjson.loads(_mend(s))
        except orjson.JSONDecodeError:
            problems.add(source, no, "bad_event", "not an event even once mended: skipped")
            continue
        if not isinstance(ev, dict) or ev.get("ph") not in ("b", "e") or "ts" not in ev:
            problems.add(source, no, "bad_event", "not a begin or end event: skipped")
            continue
        events.append((no, ev))
    out = ProfilerTrace(source)
    open_: dict[tuple, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    ends: dict[int, float] = {}
    order: list[tuple[int, dict[str, Any]]] = []
    for no, ev in events:
        key = (ev.get("cat"), ev.get("name"), ev.get("id"), ev.get("pid"))
        if ev["ph"] == "b":
            open_[key].append((no, ev))
            order.append((no, ev))
        elif open_[key]:
            b_no, _ = open_[key].pop()
            ends[b_no] = float(ev["ts"])
    for no, ev in order:
        end = ends.get(no)
        if end is None:
            out.unmatched += 1
        out.spans.append(Span(str(ev.get("cat")), str(ev.get("name")), int(ev.get("id", 0)),
                              int(ev.get("pid", -1)), float(ev["ts"]), end,
                              ev.get("args") or {}, no))
    if out.unmatched:
        problems.add(source, None, "unmatched", f"{out.unmatched} begin events have no end "
                     "(a trace cut short): their durations are unknown")
    _calls(out, source)
    return out


def _calls(out: ProfilerTrace, source: str) -> None:
    anchors: dict[int, list[float]] = defaultdict(list)
    current: dict[str, Any] | None = None
    calls: list[dict[str, Any]] = []
    rank_of_file = _NAME.search(source)
    for sp in sorted(out.spans, key=lambda s: s.line):
        a = sp.args
        if sp.cat in ("COLL", "P2P"):
            current = {"span": sp, "kernels": [], "transfers": []}
            calls.append(current)
        elif sp.cat == "GPU" and sp.name == "KernelCh":
            start, stop = int(a.get("StartGpuClk", 0) or 0), int(a.get("StopGpuClk", 0) or 0)
            if start > 0:
                anchors[sp.pid].append(start / 1000 - sp.begin_us)
            if current is not None:
                current["kernels"].append((start, stop))
        elif sp.cat == "PROXY" and sp.name in ("ProgressSend", "ProgressRecv") \
                and current is not None:
            current["transfers"].append(ProfilerTransfer(
                sp.name == "ProgressSend", int(a.get("Channel", -1)), int(a.get("Peer", -1)),
                int(a.get("Steps", 0)), int(a.get("ChunkSize", 0)), int(a.get("transSize", 0)),
                sp.begin_us, sp.end_us))
    out.offset_us = {pid: statistics.median(v) for pid, v in anchors.items()}
    for c in calls:
        sp, a = c["span"], c["span"].args
        try:
            comm = comm_hash(a["CommHash"])
        except (KeyError, ValueError):
            if rank_of_file is None:
                continue
            comm = int(rank_of_file.group(1))
        starts = [s for s, _ in c["kernels"] if s > 0]
        stops = [e for _, e in c["kernels"]]
        last_stop = max(stops) if stops and min(stops) > 0 else None
        out.calls.append(ProfilerCall(
            sp, comm, int(a.get("Rank", -1)), op_name(sp.name),
            int(a["SeqNum"]) if "SeqNum" in a else None,
            int(a.get("Peer", -1)) if sp.cat == "P2P" else -1, int(a.get("Count", 0)),
            str(a.get("Datatype", "")), min(starts) if starts else None,
            last_stop, tuple(c["transfers"])))
    for pid in {s.pid for s in out.spans}:
        out.offset_us.setdefault(pid, None)


def read_trace_file(path: str | Path, problems: Problems | None = None) -> ProfilerTrace:
    p = Path(path)
    return parse_trace(p.read_text(errors="replace"), str(p), problems)
