"""``ncclras`` status reports, JSON (``-f json``, NCCL 2.28.7+) and text (the default).

JSON gives every communicator with every rank's process, GPU, state and per-type launch counts
(``collective_counts``, NCCL's ``comm->seqNumber[func]``: calls *launched*, not completed), and
the ranks RAS could not reach. Text gives the job summary, one table row per group of alike
communicators, and, only for outliers, the ranks behind (``N ranks have launched up to operation
M``), the processes missing or dead, and errors. Both are parsed into :class:`RasSnapshot`; a
file may hold several reports one after the other (``while sleep 10; do ncclras -f json; done``),
read as a list of snapshots.

The JSON ``timestamp`` is local time (``%F %T``, as ``ncclras`` prints it) and is read in this
machine's time zone; a text report carries no time, so the caller gives one (the poll time, or
the file's modification time).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from c4.errors import FormatError
from diagnosis.nccl.ids import comm_hash
from diagnosis.nccl.problems import Problems

__all__ = ["RasComm", "RasMismatch", "RasPeer", "RasRank", "RasSnapshot", "parse_ras",
           "parse_ras_json", "parse_ras_text", "read_ras_file"]


@dataclass(frozen=True)
class RasRank:
    """One rank of a communicator as RAS reports it (JSON ``ranks[]``)."""

    rank: int
    host: str
    pid: int
    cuda_dev: int
    nvml_dev: int
    init_state: int = 0          # 0 ok, 7 in progress, else an ncclResult_t
    async_error: int = 0
    finalize_called: bool = False
    destroy_flag: bool = False
    abort_flag: bool = False
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.init_state not in (0, 7) or self.async_error not in (0, 7)


@dataclass(frozen=True)
class RasMissing:
    """A rank RAS has no data from (JSON ``missing_ranks[]``, text ``The missing rank``)."""

    rank: int
    host: str = "unknown"
    pid: int = -1
    cuda_dev: int = -1
    nvml_dev: int = -1
    unresponsive: bool = False
    considered_dead: bool = False


@dataclass(frozen=True)
class RasComm:
    """One communicator: hash (``secondary_hash`` tells apart two with the same hash), size,
    the ranks that reported and those missing."""

    hash: int
    size: int
    ranks: tuple[RasRank, ...] = ()
    missing: tuple[RasMissing, ...] = ()
    secondary_hash: str = ""


@dataclass(frozen=True)
class RasPeer:
    """A process a text report names: pid, node (an IP address) and GPUs."""

    pid: int
    node: str
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class RasMember:
    """A member line of a text report: ``Rank R -- GPU G managed by process P on node N``,
    with the value its bucket or its own line gives (a status or a launch count)."""

    rank: int
    gpu: int | None = None
    pid: int | None = None
    node: str | None = None
    value: int | str | None = None


@dataclass(frozen=True)
class RasMismatch:
    """A text report's ``#g-c (hash) MISMATCH`` (or ``INCOMPLETE``/``ERROR``) entry: ``what``
    is ``status``, ``counts`` (with ``op``: the type, None before 2.26 where one count covered
    every collective), ``missing`` or ``error``; ``buckets`` holds (ranks, value) per line
    ``N ranks have …``; ``members`` the ranks the report lists (outliers only)."""

    group: int
    index: int
    hash: int
    what: str
    op: str | None = None
    buckets: tuple[tuple[int, int | str], ...] = ()
    members: tuple[RasMember, ...] = ()
    detail: tuple[str, ...] = ()


@dataclass(frozen=True)
class RasGroupRow:
    """A row of the text report's communicators table."""

    group: int
    comms: int
    nodes: int
    ranks_per_node: str
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: str


@dataclass(frozen=True)
class RasSnapshot:
    """One ``ncclras`` status report. ``t_ns`` is when it was taken (None: unknown)."""

    source: str
    line: int
    t_ns: int | None
    format: str                          # "json" or "text"
    nccl_version: str = ""
    cuda_runtime: int | None = None
    cuda_driver: int | None = None
    comms: tuple[RasComm, ...] = ()
    timeouts: int = 0
    collection_s: float | None = None
    summary: dict[str, int] = field(default_factory=dict)
    groups: tuple[RasGroupRow, ...] = ()
    entries: tuple[RasMismatch, ...] = ()
    incomplete: tuple[RasPeer, ...] = ()
    dead: tuple[RasPeer, ...] = ()


# ----- JSON ----------------------------------------------------------------------------------
def parse_ras_json(obj: Any, source: str = "", line: int = 1) -> RasSnapshot:
    """One ``ncclras -f json`` report.

    Raises:
        FormatError: a field is missing or of the wrong type (names the field).
    """
    if not isinstance(obj, dict):
        raise FormatError("a RAS JSON report is an object", source=source, line=line)
    try:
        comms = tuple(_comm(c) for c in obj.get("communicators") or ())
        ras = obj.get("ras") or {}
        return RasSnapshot(
            source, line, _local_ns(obj.get("timestamp")), "json",
            nccl_version=str(obj.get("nccl_version", "")),
            cuda_runtime=obj.get("cuda_runtime_version"),
            cuda_driver=obj.get("cuda_driver_version"), comms=comms,
            timeouts=int(ras.get("timeouts_count", 0) or 0),
            collection_s=ras.get("collection_time_sec"))
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"not a RAS JSON status report ({exc!r}); give the output of "
                          "`ncclras -f json`", source=source, line=line) from None


def _comm(c: dict[str, Any]) -> RasComm:
    ranks = tuple(RasRank(
        int(r["rank"]), str(r.get("host", "unknown")), int(r.get("pid", -1)),
        int(r.get("cuda_dev", -1)), int(r.get("nvml_dev", -1)),
        int((r.get("status") or {}).get("init_state", 0)),
        int((r.get("status") or {}).get("async_error", 0)),
        bool((r.get("status") or {}).get("finalize_called", False)),
        bool((r.get("status") or {}).get("destroy_flag", False)),
        bool((r.get("status") or {}).get("abort_flag", False)),
        {str(k): int(v) for k, v in (r.get("collective_counts") or {}).items()})
        for r in c.get("ranks") or ())
    missing = tuple(RasMissing(
        int(m["rank"]), str(m.get("host", "unknown")), int(m.get("pid", -1)),
        int(m.get("cuda_dev", -1)), int(m.get("nvml_dev", -1)),
        bool((m.get("status") or {}).get("unresponsive", False)),
        bool((m.get("status") or {}).get("considered_dead", False)))
        for m in c.get("missing_ranks") or ())
    return RasComm(comm_hash(c["hash"]), int(c["size"]), ranks, missing,
                   str(c.get("secondary_hash", "")))


def _local_ns(stamp: Any) -> int | None:
    """``%F %T`` in this machine's time zone (as ncclras printed it) as epoch ns."""
    if not isinstance(stamp, str):
        return None
    try:
        return int(time.mktime(time.strptime(stamp.strip(), "%Y-%m-%d %H:%M:%S")) * 1e9)
    except ValueError:
        return None


# ----- text ----------------------------------------------------------------------------------
_VERSION = re.compile(r"^NCCL version (\S+)")
_CUDA = re.compile(r"^CUDA runtime version (\d+), driver version (\d+)")
_COMMS = re.compile(r"^Communicators\.\.\.\s*\((\d+(?:\.\d+)?)s\)")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+"
                  r"([A-Z,]+)\s*$")
_ENTRY = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]{16})\) ([A-Z]+)\s*$")
_PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPUs? ([\d, ()NVML]*)")
_MEMBER = re.compile(
    r"^\s*Rank (\d+)(?: has (?:status (\w+)|launched up to operation (\d+)|"
    r"(not launched any operations)))?\s+--\s+(?:GPU (\d+)(?: \(NVML \d+\))? managed by "
    r"process (\d+) on node (\S+)|\[process information not found\])")
_BUCKET = re.compile(r"^\s*(\d+) ranks have (?:status (\w+)|launched up to operation (\d+)|"
                     r"(not launched any operations))")
_MISSING = re.compile(r"^\s*The missing ranks?: ([\d, ]+)")
_COUNTS = re.compile(r"different (\w+) operation counts")
_TIMEOUTS = re.compile(r"Encountered (\d+) communication timeouts?")
_SUMMARY_KEYS = ("nodes", "processes_per_node", "gpus_per_process", "processes", "gpus")


def parse_ras_text(text: str, source: str = "", t_ns: int | None = None, line: int = 1,
                   problems: Problems | None = None) -> RasSnapshot:
    """One text report (or any of its sections: the doc's excerpts are parsed alike). Lines
    this parser does not know (``[...]`` elisions) are skipped."""
    problems = problems if problems is not None else Problems()
    version = ""
    cuda: tuple[int | None, int | None] = (None, None)     # runtime, driver
    collection: float | None = None
    summary: dict[str, int] = {}
    rows: list[RasGroupRow] = []
    entries: list[RasMismatch] = []
    incomplete: list[RasPeer] = []
    dead: list[RasPeer] = []
    timeouts = 0
    section = ""
    block: str | None = None          # INCOMPLETE / DEAD / TIMEOUT, or an entry
    entry: dict[str, Any] | None = None
    lines = text.replace("\r\n", "\n").split("\n")
    for off, raw in enumerate(lines):
        s = raw.strip()
        no = line + off
        if not s or set(s) <= {"="}:
            continue
        if m := _VERSION.match(s):
            version = m.group(1)
        elif m := _CUDA.match(s):
            cuda = (int(m.group(1)), int(m.group(2)))
        elif s in ("Job summary", "Errors", "Warnings") or s.startswith("Communicators..."):
            section, block = s.split("...")[0], None
            entries += _close(entry)
            entry = None
            if m := _COMMS.match(s):
                collection = float(m.group(1))
        elif section == "Job summary" and re.fullmatch(r"[\d\s-]+", s):
            nums = [int(x) for x in re.findall(r"\d+", s)]
            if len(nums) == 5:
                summary = dict(zip(_SUMMARY_KEYS, nums))
        elif m := _ROW.match(raw):
            g = m.groups()
            rows.append(RasGroupRow(int(g[0]), int(g[1]), int(g[2]), g[3], int(g[4]),
                                    int(g[5]), g[6], g[7]))
        elif m := _ENTRY.match(s):
            entries += _close(entry)
            entry = {"group": int(m.group(1)), "index": int(m.group(2)),
                     "hash": int(m.group(3), 16), "kind": m.group(4), "what": None, "op": None,
                     "buckets": [], "members": [], "detail": [], "value": None}
            block = "entry"
        elif s in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            entries += _close(entry)
            entry, block = None, s
        elif block in ("INCOMPLETE", "DEAD") and (m := _PROCESS.match(raw)):
            gpus = tuple(int(x) for x in re.findall(r"(?<!NVML )\b(\d+)\b", m.group(3)))
            (incomplete if block == "INCOMPLETE" else dead).append(
                RasPeer(int(m.group(1)), m.group(2), gpus))
        elif block == "TIMEOUT" and (m := _TIMEOUTS.search(s)):
            timeouts = int(m.group(1))
        elif block == "entry" and entry is not None:
            _entry_line(entry, raw, s)
        elif s in ("No communicator data collected!",) or s.startswith(("Group", "#  in")) \
                or s.startswith(("Nodes", "(total)")) or s == "[...]" or \
                block in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            continue
        else:
            problems.add(source, no, "ras_line", f"a line this reader does not know: {s[:80]!r}"
                         " (skipped)")
    entries += _close(entry)
    return RasSnapshot(source, line, t_ns, "text", nccl_version=version, cuda_runtime=cuda[0],
                       cuda_driver=cuda[1], timeouts=timeouts, collection_s=collection,
                       summary=summary, groups=tuple(rows), entries=tuple(entries),
                       incomplete=tuple(incomplete), dead=tuple(dead))


def _entry_line(entry: dict[str, Any], raw: str, s: str) -> None:
    if "different status" in s:
        entry["what"], entry["op"], entry["value"] = "status", None, None
    elif m := _COUNTS.search(s):
        entry["what"] = "counts"
        entry["op"] = None if m.group(1) == "collective" else m.group(1)
        entry["value"] = None
    elif s.startswith("Missing communicator data"):
        entry["what"] = "missing"
    elif "error" in s.lower() and entry["kind"] == "ERROR":
        entry["what"] = "error"
        entry["detail"].append(s)
    elif m := _BUCKET.match(raw):
        value: int | str = m.group(2) or (int(m.group(3)) if m.group(3) else 0)
        entry["buckets"].append((int(m.group(1)), value))
        entry["value"] = value
    elif m := _MEMBER.match(raw):
        own: int | str | None = m.group(2) or (int(m.group(3)) if m.group(3) else
                                               (0 if m.group(4) else None))
        value = own if own is not None else entry["value"]
        if own is not None:
            entry["buckets"].append((1, own))
        entry["members"].append(RasMember(int(m.group(1)),
                                          int(m.group(5)) if m.group(5) else None,
                                          int(m.group(6)) if m.group(6) else None,
                                          m.group(7), value))
    elif m := _MISSING.match(raw):
        for r in re.findall(r"\d+", m.group(1)):
            entry["members"].append(RasMember(int(r), value="missing"))
    else:
        entry["detail"].append(s)


def _close(entry: dict[str, Any] | None) -> list[RasMismatch]:
    if entry is None:
        return []
    what = entry["what"] or entry["kind"].lower()
    return [RasMismatch(entry["group"], entry["index"], entry["hash"], what, entry["op"],
                        tuple(entry["buckets"]), tuple(entry["members"]),
                        tuple(entry["detail"]))]


# ----- files -----------------------------------------------------------------------------------
def parse_ras(text: str, source: str = "", t_ns: int | None = None,
              problems: Problems | None = None) -> list[RasSnapshot]:
    """Every report in ``text``: JSON objects one after the other, or text reports (a new one
    begins at each ``NCCL version`` line)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _json_docs(text, source, problems)
    out = []
    starts = [i for i, ln in enumerate(text.split("\n")) if ln.startswith("NCCL version ")]
    lines = text.split("\n")
    if not starts or (starts[0] != 0 and any(x.strip() for x in lines[:starts[0]])):
        starts = [0, *starts]
    for a, b in zip(starts, [*starts[1:], len(lines)]):
        chunk = "\n".join(lines[a:b])
        if chunk.strip():
            out.append(parse_ras_text(chunk, source, t_ns, a + 1, problems))
    return out


def _json_docs(text: str, source: str, problems: Problems | None = None) -> list[RasSnapshot]:
    dec = json.JSONDecoder()
    pos = 0
    out: list[RasSnapshot] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        line = text.count("\n", 0, pos) + 1
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            # NCCL 2.28's RAS writes no comma after a missing rank's "nvml_dev" (seen in a real
            # report of a stopped process): a member that follows another with no comma
            # between them is read as if the comma were there
            if exc.msg != "Expecting ',' delimiter" or text[exc.pos:exc.pos + 1] != '"':
                raise FormatError(f"not valid JSON ({exc.msg}); the report may be cut short",
                                  source=source, line=exc.lineno) from None
            (problems if problems is not None else Problems()).add(
                source, exc.lineno, "ras_json_comma",
                "a comma is missing before this member (NCCL 2.28's RAS leaves it out after "
                "a missing rank's nvml_dev): read as if it were there")
            text = text[:exc.pos] + "," + text[exc.pos:]
            continue
        pos = end
        out.append(parse_ras_json(obj, source, line))


def read_ras_file(path: str | Path, problems: Problems | None = None) -> list[RasSnapshot]:
    """The reports in a file; text reports, which carry no time, are dated by the file's
    modification time."""
    p = Path(path)
    text = p.read_text(errors="replace")
    return parse_ras(text, str(p), int(p.stat().st_mtime * 1e9), problems)

