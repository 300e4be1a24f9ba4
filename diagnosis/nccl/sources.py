"""Gather a job's NCCL telemetry from the paths a user gives (``c4 analyze --nccl-inspector DIR
--ncclras FILE --logs FILE… --nccl-profiler FILE…``), each file read by its source's reader.

What a file is, where a flag takes several kinds, is told from its content: a ``ncclras`` file
holds status reports or monitor events; a profiler file is the example plugin's Chrome trace
(it opens with ``[``) or CoMMA's latency records (JSON objects with ``cat``).
"""

from __future__ import annotations

import glob
import logging
import os
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from diagnosis.errors import DiagnosisError
from diagnosis.nccl.comma import CommaRecords, read_comma_file
from diagnosis.nccl.inspector import find_inspector_files, read_inspector_file
from diagnosis.nccl.logs import LogFacts, read_logs
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.profiler_trace import ProfilerTrace, read_trace_file
from diagnosis.nccl.prometheus import PromFile, read_prom_file
from diagnosis.nccl.ras import RasSnapshot, read_ras_file
from diagnosis.nccl.ras_monitor import RasEvent, read_monitor_file
from diagnosis.nccl.records import NcclOps

log = logging.getLogger(__name__)

__all__ = ["NcclSources", "expand_paths", "read_sources"]


@dataclass
class NcclSources:
    """Everything read: operation rows (each file's in file order), RAS reports and events,
    log facts, the Prometheus files, profiler traces and CoMMA records, and the problems met."""

    ops: list[NcclOps] = field(default_factory=list)
    ras: list[RasSnapshot] = field(default_factory=list)
    events: list[RasEvent] = field(default_factory=list)
    logs: LogFacts = field(default_factory=LogFacts)
    prom: list[PromFile] = field(default_factory=list)
    traces: list[ProfilerTrace] = field(default_factory=list)
    comma: list[CommaRecords] = field(default_factory=list)
    problems: Problems = field(default_factory=Problems)
    files: Counter = field(default_factory=Counter)

    @property
    def n_ops(self) -> int:
        return sum(len(b) for b in self.ops)


def read_sources(inspector: Iterable[str | Path] = (), ras: Iterable[str | Path] = (),
                 logs: Iterable[str | Path] = (), profiler: Iterable[str | Path] = (),
                 problems: Problems | None = None, workers: int | None = 0) -> NcclSources:
    """Read every source given; ``workers`` > 1 reads the Inspector files in that many
    processes (None: one per CPU, at most 4; this process only waits for them).

    Raises:
        DiagnosisError: a path does not exist, or an Inspector directory holds no Inspector
            file (the message says how to get some).
    """
    out = NcclSources(problems=problems if problems is not None else Problems())
    if workers is None:
        workers = min(4, os.cpu_count() or 1)
    for root in inspector:
        _inspector(Path(root), out, workers)
    for f in ras:
        _ras(_exists(f), out)
    logs = [_exists(f) for f in logs]
    if logs:
        out.logs = read_logs(logs, out.problems)
        out.files["log"] += len(logs)
    for f in profiler:
        _profiler(_exists(f), out)
    return out


def _exists(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise DiagnosisError(f"{p} does not exist")
    return p


def expand_paths(paths: Iterable[str]) -> list[Path]:
    """Files named, every file of a directory named, and the files a quoted glob matches.

    Raises:
        DiagnosisError: a name matches nothing."""
    out: list[Path] = []
    for name in paths:
        p = Path(name)
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
        elif p.exists():
            out.append(p)
        elif any(ch in name for ch in "*?["):
            found = sorted(Path(g) for g in glob.glob(name) if Path(g).is_file())
            if not found:
                raise DiagnosisError(f"{name} matches no file")
            out += found
        else:
            raise DiagnosisError(f"{name} does not exist")
    return out


def _read_one(path: Path) -> tuple[list[NcclOps], Problems]:
    problems = Problems()
    return [b for b in read_inspector_file(path, problems=problems) if len(b)], problems


def _inspector(root: Path, out: NcclSources, workers: int = 0) -> None:
    _exists(root)
    files = find_inspector_files(root)
    proms = sorted(root.rglob("*.prom")) if root.is_dir() else \
        ([root] if root.name.endswith(".prom") else [])
    if not files and not proms:
        raise DiagnosisError(
            f"{root} holds no NCCL Inspector output (*.log, *.jsonl, *.prom): the Inspector "
            "writes nothing unless NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS is set "
            "(c4 run --nccl-inspector sets it), into NCCL_INSPECTOR_DUMP_DIR or "
            "nccl-inspector-<jobid> in the job's working directory")
    out.files["inspector"] += len(files)
    if workers > 1 and len(files) > 1:
        with ProcessPoolExecutor(workers) as pool:
            done = list(pool.map(_read_one, files, chunksize=max(1, len(files) // (4 * workers))))
    else:
        done = [_read_one(f) for f in files]
    for parts, problems in done:
        out.ops.extend(parts)
        out.problems.merge(problems)
    for f in proms:
        out.files["prometheus"] += 1
        pf = read_prom_file(f, out.problems)
        out.prom.append(pf)
        ops = pf.ops()
        if len(ops):
            out.ops.append(ops)


def _ras(path: Path, out: NcclSources) -> None:
    head = path.read_text(errors="replace")[:4096].lstrip()
    if head.startswith("RAS Monitor Mode") or head.startswith("[") or \
            ('"event"' in head and '"communicators"' not in head):
        out.files["ras_monitor"] += 1
        out.events.extend(read_monitor_file(path, out.problems))
    else:
        out.files["ras"] += 1
        out.ras.extend(read_ras_file(path, out.problems))


def _profiler(path: Path, out: NcclSources) -> None:
    head = path.read_text(errors="replace")[:4096].lstrip()
    if head.startswith("["):
        out.files["profiler_trace"] += 1
        trace = read_trace_file(path, out.problems)
        out.traces.append(trace)
        ops = trace.ops()
        if len(ops):
            out.ops.append(ops)
    else:
        out.files["comma"] += 1
        recs = read_comma_file(path, out.problems)
        out.comma.append(recs)
        ops = recs.ops()
        if len(ops):
            out.ops.append(ops)
