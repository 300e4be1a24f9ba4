"""CoMMA's latency records (``NCCL_PROFILER_LATENCY_FILE=…/latency-%p.txt``).

One JSON object per line (serde_json; the documentation's sample is pretty-printed, which this
reader also takes): a collective or point-to-point call (``cat`` ``COLL``/``P2P``) with ``ts``
and ``dur`` (µs: when it was enqueued and for how long), ``child_start_ts``/``child_dur`` (its
real execution), ``comm_hash`` (``0x%016x``), ``rank``, ``name`` (``all_reduce``, ``send``…),
``seq_num`` (NCCL's per-type counter) or ``peer``, ``args.size`` (bytes), and the proxy
operations it ran (``proxyops``: per peer and direction, steps with their start and end). A
record with ``reclaimed: true`` was reaped by the plugin's timeout: it had not finished.
Standalone ``ProxyOp`` records (``cat`` ``PROXY``) are kept as transfers of no known call.

``ts`` is Unix-epoch µs in current CoMMA and a small process-relative value in the documented
sample: both are read as they are; times of different processes then line up only in the
first case (a warning says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.pretty import json_documents
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import CommKey, NcclOps, OpRecord

__all__ = ["CommaCall", "CommaProxyOp", "CommaRecords", "parse_comma", "read_comma_file"]

#: below this, ``ts`` cannot be Unix-epoch µs (2001-09-09)
_EPOCH_US = 1_000_000_000_000_000


@dataclass(frozen=True)
class CommaProxyOp:
    """A proxy operation: ``steps`` as (step, bytes, start µs, end µs)."""

    peer: int
    send: bool
    channel: int
    n_steps: int
    chunk: int
    pid: int | None
    ts_us: float
    dur_us: float
    steps: tuple[tuple[int, int, float, float], ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(s[1] for s in self.steps)


@dataclass(frozen=True)
class CommaCall:
    """A collective or point-to-point call."""

    line: int
    comm: int
    rank: int
    op: str
    sn: int | None
    peer: int
    nbytes: int
    ts_us: float
    dur_us: float
    exec_start_us: float | None
    exec_us: float | None
    reclaimed: bool = False
    algo: str | None = None
    proto: str | None = None
    proxyops: tuple[CommaProxyOp, ...] = ()


@dataclass
class CommaRecords:
    source: str
    pid: int | None = None
    calls: list[CommaCall] = field(default_factory=list)
    proxyops: list[CommaProxyOp] = field(default_factory=list)

    @property
    def epoch(self) -> bool:
        """Whether the times are Unix-epoch µs (else relative to the process)."""
        return any(c.ts_us >= _EPOCH_US for c in self.calls)

    def ops(self, host: str = "", nranks: int = 0) -> NcclOps:
        """The finished calls as operation rows (a reclaimed call had not finished)."""
        recs = []
        for c in self.calls:
            if c.reclaimed or (c.exec_us is None and c.dur_us <= 0):
                continue
            start = round(c.exec_start_us) if c.exec_start_us is not None else None
            stop = round(c.exec_start_us + c.exec_us) if c.exec_start_us is not None \
                and c.exec_us is not None else round(c.ts_us + c.dur_us)
            recs.append(OpRecord(
                self.source, c.line, CommKey(c.comm, c.rank, nranks), host,
                self.pid if self.pid is not None else -1, "", stop, c.op, c.op,
                c.sn if c.sn is not None else 0, c.peer, c.nbytes,
                None if c.exec_us is None else round(c.exec_us), "child", math.nan, math.nan,
                round(c.ts_us), start, stop))
        return NcclOps.from_records(recs, self.source)


def _proxy(p: dict[str, Any]) -> CommaProxyOp:
    steps = tuple((int(s.get("step", 0)), int(s.get("size", 0)), float(s["start_time"]),
                   float(s["end_time"])) for s in p.get("steps") or ())
    return CommaProxyOp(int(p.get("peer", -1)), bool(p.get("is_send")),
                        int(p.get("channel_id", -1)), int(p.get("n_steps", len(steps))),
                        int(p.get("chunk_size", 0)), p.get("pid"), float(p.get("ts", 0)),
                        float(p.get("dur", 0)), steps)


def _call(o: dict[str, Any], line: int) -> CommaCall:
    cat = o["cat"]
    child = o.get("child_start_ts")
    return CommaCall(
        line, comm_hash(o["comm_hash"]), int(o["rank"]), op_name(str(o["name"])),
        int(o["seq_num"]) if cat == "COLL" and "seq_num" in o else None,
        int(o.get("peer", -1)) if cat == "P2P" else -1,
        int((o.get("args") or {}).get("size", 0)), float(o["ts"]), float(o.get("dur", 0)),
        float(child) if child is not None else None,
        float(o["child_dur"]) if "child_dur" in o else None, bool(o.get("reclaimed", False)),
        o.get("algo"), o.get("proto"), tuple(_proxy(p) for p in o.get("proxyops") or ()))


def parse_comma(text: str, source: str = "", problems: Problems | None = None,
                pid: int | None = None) -> CommaRecords:
    """The records of one latency file (JSON lines, or pretty-printed objects)."""
    problems = problems if problems is not None else Problems()
    out = CommaRecords(source, pid)
    objs: list[tuple[int, Any]] = []
    lines = text.split("\n")
    if len(lines) > 1 and lines[0].strip() == "{":      # pretty-printed objects
        objs = list(json_documents(text, source, problems))
    else:
        for no, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                objs.append((no, orjson.loads(raw)))
            except orjson.JSONDecodeError:
                problems.add(source, no, "bad_line", "not a JSON object (a truncated line?): "
                             "skipped")
    for no, o in objs:
        if not isinstance(o, dict):
            continue
        cat = o.get("cat")
        try:
            if cat in ("COLL", "P2P"):
                out.calls.append(_call(o, no))
            elif cat == "PROXY":
                out.proxyops.append(_proxy(o))
                if out.pid is None and isinstance(o.get("pid"), int):
                    out.pid = o["pid"]
            else:
                problems.add(source, no, "unknown_record", f"a record of category {cat!r}: "
                             "skipped")
        except (KeyError, TypeError, ValueError) as exc:
            problems.add(source, no, "bad_field", f"a {cat} record without a readable "
                         f"{exc.args[0] if exc.args else 'field'}: skipped")
    if out.pid is None:
        out.pid = next((p.pid for c in out.calls for p in c.proxyops if p.pid is not None), None)
    if out.calls and not out.epoch:
        problems.add(source, None, "relative_time", "times are relative to the process (not "
                     "Unix-epoch µs): they line up with no other process's")
    return out


def read_comma_file(path: str | Path, problems: Problems | None = None) -> CommaRecords:
    """One latency file; its pid from the ``%p`` in its name when the records do not say."""
    p = Path(path)
    digits = "".join(ch for ch in p.stem.split("-")[-1] if ch.isdigit())
    recs = parse_comma(p.read_text(errors="replace"), str(p), problems)
    if recs.pid is None and digits:
        recs.pid = int(digits)
    return recs
