"""Parse the output of nccl-tests (all_reduce_perf, all_gather_perf, alltoall_perf, ...).

Takes the shapes seen in the wild: lines prefixed by the launcher (``srun -l``'s ``0: ``, Open
MPI ``--tag-output``'s ``[1,0]<stdout>:``), NCCL INFO lines from every rank interleaved with the
table, headers with and without the root column or the Group field, bus ids as ``[0x35]`` or
``[0000:35:00]``, ``N/A`` in ``#wrong``, per-iteration and timestamp columns, footers with or
without ``OK``/``FAILED``, the newer version and ``# Collective test concluded`` lines, several
runs in one log, and the JSON file newer builds write with ``-J``. The table is read by the
columns its own header names, so builds that add columns do not shift the values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from c4.errors import FormatError
from diagnosis.probes.nccl_tests_json import run_from_json
from diagnosis.probes.nccl_tests_records import (
    Device,
    Measurement,
    NcclTestsRun,
    SizeResult,
    version_of_code,
)

_OMPI = re.compile(r"^.*?\[\d+,\d+\]<(?P<stream>stdout|stderr|stddiag)>:\s?")
_SRUN = re.compile(r"^\s*\d+:(?: |$)")
_ROW = re.compile(r"^\s*-?\d+\s+-?\d+\s+[A-Za-z]")
_DEVICE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>.+?)\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(?P<v>\S+)(?:.*?nccl-library=(?P<lib>\d+))?")
_NCCL_VERSION = re.compile(r"\bNCCL version (?P<v>\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<ok>OK|FAILED)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)\s*(?P<ok>OK|FAILED)?")
_ERROR = re.compile(r"^#\s*error:\s*(?P<msg>.+)$")
_PARAM_INT = re.compile(r"(nThread|nGpus|minBytes|maxBytes|warmup iters|agg iters|iters|"
                        r"validation|graph|unalign):\s*(-?\d+)|(nThread|nGpus|minBytes|"
                        r"maxBytes)\s+(-?\d+)")
_STEP = re.compile(r"step:\s*(?P<n>\d+)\((?P<kind>factor|bytes)\)")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME_KEYS = ("time", "cputime")
_WRONG_KEYS = ("#wrong", "error", "wrong")

# Per-iteration columns, named as the JSON output names them.
_PER_ITER = {"i_min": "min_us", "i_max": "max_us", "i_p99": "p99_us", "i_cv%": "cv_pct"}

# Column layouts for tables whose header line was lost, by number of columns.
_BLOCK = ("time", "algbw", "busbw", "#wrong")
_FALLBACK = {
    13: (("size", "count", "type", "redop", "root"), (_BLOCK, _BLOCK)),
    12: (("size", "count", "type", "redop"), (_BLOCK, _BLOCK)),
}


def load_nccl_tests(path: Path) -> list[NcclTestsRun]:
    """Every run in an nccl-tests log or JSON file."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror}", source=str(path)) from exc
    return parse_nccl_tests(text, source=Path(path).name)


def parse_nccl_tests(text: str, source: str = "") -> list[NcclTestsRun]:
    """Every run in ``text`` (a console log, or the JSON file of ``-J``), in order.

    Raises:
        FormatError: a result line cannot be read (the message names the line and column),
            or the text holds no nccl-tests output at all.
    """
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(f"not valid JSON ({exc.msg}); the file may be truncated",
                              source=source, line=exc.lineno) from exc
        return [run_from_json(obj, source)]
    parser = _TextParser(source)
    for n, raw in enumerate(text.splitlines(), start=1):
        parser.feed(n, raw)
    runs = parser.finish()
    if not runs:
        raise FormatError("no nccl-tests output found (no header, result line or footer)",
                          source=source)
    return runs


def parse_nccl_tests_run(text: str, source: str = "") -> NcclTestsRun:
    """The single run in ``text``; an error if there are several."""
    runs = parse_nccl_tests(text, source)
    if len(runs) != 1:
        raise FormatError(f"{len(runs)} runs in one output; use parse_nccl_tests for logs "
                          "of several runs", source=source)
    return runs[0]


@dataclass
class _Layout:
    lead: tuple[str, ...]
    blocks: tuple[tuple[str, ...], ...]
    timestamp: bool = False

    @property
    def width(self) -> int:
        return len(self.lead) + sum(len(b) for b in self.blocks)


@dataclass
class _Draft:
    """A run being read."""

    test: str | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    params: dict[str, int | str] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)
    results: list[SizeResult] = field(default_factory=list)
    avg: float | None = None
    avg_ok: bool | None = None
    oob: int | None = None
    oob_ok: bool | None = None
    errors: list[str] = field(default_factory=list)
    complete: bool = False
    layout: _Layout | None = None

    @property
    def started(self) -> bool:
        return bool(self.params or self.devices or self.results or self.layout
                    or self.avg is not None or self.oob is not None)

    def build(self) -> NcclTestsRun:
        return NcclTestsRun(
            test=self.test, nccl_tests_version=self.nccl_tests_version,
            nccl_version=self.nccl_version, params=dict(self.params),
            devices=tuple(self.devices), results=tuple(self.results), avg_busbw_GBps=self.avg,
            avg_busbw_ok=self.avg_ok, out_of_bounds=self.oob, out_of_bounds_ok=self.oob_ok,
            errors=tuple(self.errors), complete=self.complete)


class _TextParser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.runs: list[NcclTestsRun] = []
        self.draft = _Draft()
        self.pending_version: tuple[str | None, str | None] = (None, None)

    def finish(self) -> list[NcclTestsRun]:
        self._flush()
        return self.runs

    def _flush(self) -> None:
        if self.draft.started:
            self.runs.append(self.draft.build())
        self.draft = _Draft()

    def _new_run_if_needed(self) -> None:
        d = self.draft
        if d.results or d.complete or d.layout is not None:
            self._flush()

    def feed(self, n: int, raw: str) -> None:
        line = raw.rstrip("\r\n")
        m = _OMPI.match(line)
        if m:
            if m.group("stream") != "stdout":
                return
            line = line[m.end():]
        else:
            m = _SRUN.match(line)
            if m:
                line = line[m.end():]
        payload = line.strip()
        if not payload:
            return
        if payload.startswith("#"):
            self._comment(n, payload)
            return
        v = _NCCL_VERSION.search(payload)
        if v:
            if self.draft.complete:  # NCCL's banner of the next run's process
                self._flush()
            self.draft.nccl_version = self.draft.nccl_version or v.group("v")
            return
        if "NCCL INFO" in payload or "NCCL WARN" in payload:
            return
        if _ROW.match(payload):
            self.draft.results.append(self._row(n, payload))

    def _comment(self, n: int, p: str) -> None:
        d = self.draft
        m = _STARTING.match(p)
        if m:
            self._new_run_if_needed()
            self.draft.test = m.group("name")
            return
        m = _VERSION.match(p)
        if m:
            self._new_run_if_needed()
            d = self.draft
            d.nccl_tests_version = m.group("v")
            if m.group("lib"):
                d.nccl_version = version_of_code(int(m.group("lib")))
            return
        if p.lstrip("# ").startswith("nThread"):
            if d.params or d.results or d.complete:
                self._new_run_if_needed()
            self.draft.params.update(_params(p))
            return
        m = _DEVICE.match(p)
        if m:
            d.devices.append(Device(
                rank=int(m.group("rank")), host=m.group("host").strip(),
                device=int(m.group("dev")), bus_id=m.group("bus"), name=m.group("name"),
                pid=int(m.group("pid")),
                group=int(m.group("group")) if m.group("group") is not None else None))
            return
        tokens = p.lstrip("#").split()
        if "size" in tokens and "count" in tokens and any(t in tokens for t in _TIME_KEYS):
            d.layout = _layout(tokens)
            return
        m = _OOB.match(p)
        if m:
            d.oob = int(m.group("n"))
            d.oob_ok = None if m.group("ok") is None else m.group("ok") == "OK"
            return
        m = _AVG.match(p)
        if m:
            d.avg = _float(m.group("bw"), n, "avg bus bandwidth", self.source)
            d.avg_ok = None if m.group("ok") is None else m.group("ok") == "OK"
            d.complete = True
            return
        m = _CONCLUDED.match(p)
        if m:
            d.test = d.test or m.group("name")
            d.complete = True
            return
        m = _ERROR.match(p)
        if m:
            d.errors.append(m.group("msg").strip())

    def _row(self, n: int, payload: str) -> SizeResult:
        tokens = payload.split()
        layout = self.draft.layout
        if layout is None:
            fallback = _FALLBACK.get(len(tokens))
            if fallback is None:
                raise FormatError(
                    f"result line with {len(tokens)} columns and no column header before it "
                    "to say what they are: pass the whole output, header included",
                    source=self.source, line=n)
            layout = _Layout(*fallback)
        if layout.timestamp and len(tokens) >= 2 and _DATE.match(tokens[-2]):
            tokens = [*tokens[:-2], f"{tokens[-2]} {tokens[-1]}"]
        values = tokens[:-1] if layout.timestamp else tokens
        lead_n = len(layout.lead)
        blocks = layout.blocks
        if len(values) == lead_n + len(blocks[-1]) and len(blocks) == 2:
            blocks = (None, blocks[-1])  # type: ignore[assignment]  # in-place only
        elif len(values) != layout.width:
            raise FormatError(
                f"expected {layout.width} columns ({' '.join(layout.lead)} and "
                f"{len(layout.blocks)} x {' '.join(layout.blocks[0])}), found {len(values)}: "
                f"{payload[:120]!r}", source=self.source, line=n)
        lead = dict(zip(layout.lead, values[:lead_n]))
        pos = lead_n
        measured: list[Measurement | None] = []
        for block in blocks:
            if block is None:
                measured.append(None)
                continue
            measured.append(self._measurement(n, block, values[pos:pos + len(block)]))
            pos += len(block)
        oop, inp = measured if len(measured) == 2 else (None, measured[-1])
        root = lead.get("root")
        return SizeResult(
            size_bytes=_int(lead.get("size", ""), n, "size", self.source),
            count=_int(lead.get("count", ""), n, "count", self.source),
            type=lead.get("type", ""), redop=lead.get("redop", ""),
            root=_int(root, n, "root", self.source) if root is not None else None,
            out_of_place=oop, in_place=inp, line=n)

    def _measurement(self, n: int, names: tuple[str, ...], vals: list[str]) -> Measurement:
        got = dict(zip(names, vals))
        time_key = next(k for k in names if k in _TIME_KEYS)
        wrong_key = next((k for k in names if k in _WRONG_KEYS), None)
        wrong_s = got.get(wrong_key, "N/A") if wrong_key else "N/A"
        wrong = None if wrong_s in ("N/A", "n/a", "-") else _float(
            wrong_s.rstrip("*"), n, "#wrong", self.source)
        per_iter = {_PER_ITER.get(k, k): _float(v, n, k, self.source) for k, v in got.items()
                    if k.startswith("i_")}
        return Measurement(time_us=_float(got[time_key], n, time_key, self.source),
                           algbw_GBps=_float(got.get("algbw", "nan"), n, "algbw", self.source),
                           busbw_GBps=_float(got.get("busbw", "nan"), n, "busbw", self.source),
                           wrong=wrong, per_iter=per_iter)


def _layout(tokens: list[str]) -> _Layout:
    starts = [i for i, t in enumerate(tokens) if t in _TIME_KEYS]
    lead = tuple(tokens[:starts[0]])
    blocks = []
    for a, b in zip(starts, [*starts[1:], len(tokens)]):
        blocks.append(tuple(tokens[a:b]))
    timestamp = bool(blocks) and blocks[-1][-1] == "timestamp"
    if timestamp:
        blocks[-1] = blocks[-1][:-1]
    return _Layout(lead=lead, blocks=tuple(blocks), timestamp=timestamp)


def _params(p: str) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for m in _PARAM_INT.finditer(p):
        key, val = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        out[key.replace(" ", "_")] = int(val)
    m = _STEP.search(p)
    if m:
        out["step_factor" if m.group("kind") == "factor" else "step_bytes"] = int(m.group("n"))
    return out


def _int(s: str, n: int, what: str, source: str) -> int:
    try:
        return int(s)
    except ValueError:
        raise FormatError(f"{what} is {s!r}, not an integer", source=source, line=n,
                          field=what) from None


def _float(s: str, n: int, what: str, source: str) -> float:
    try:
        return float(s)
    except ValueError:
        raise FormatError(f"{what} is {s!r}, not a number", source=source, line=n,
                          field=what) from None

