"""The Inspector's Prometheus text files (``NCCL_INSPECTOR_PROM_DUMP=1``).

``<dir>/nccl_inspector_metrics_<GPU-UUID>.prom``, rewritten every interval (30 s at least) and
deleted at teardown. Two formats:

* NCCL 2.30 (``version="v5.1"``): per GPU and interval, one series per (communicator name,
  ranks, nodes, operation, message-size bucket, algorithm_protocol): the geometric mean of the
  bus bandwidth and the mean execution time over the operations of the interval. Aggregates:
  no call, no rank, no sequence number: nothing c4's detectors can place; read into
  :class:`PromSample` for what an operator wants to see (a bandwidth per bucket and GPU).
* NCCL 2.29.7 and before: one series per operation, with ``comm_id``, ``rank``, ``coll_sn``
  and an ISO ``timestamp`` (to the second): read into operation rows
  (:meth:`PromFile.ops`), ending at that timestamp.

Values use ``%.6g`` (so ``1.23457e+06`` happens); there are no ``# HELP``/``# TYPE`` lines in
NCCL's output, but a scrape-side rewrite may add them, and a ``cluster`` label: both are taken.
"""

from __future__ import annotations

import calendar
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.problems import Problems
from diagnosis.nccl.records import CommKey, NcclOps, OpRecord

__all__ = ["PromFile", "PromSample", "parse_prom", "read_prom_file"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


@dataclass(frozen=True)
class PromSample:
    """One sample: metric name, labels and value."""

    metric: str
    labels: dict[str, str]
    value: float
    line: int

    @property
    def format(self) -> str:
        """``v5`` (2.30 aggregates) or ``per_op`` (2.29.7 and before, with ``coll_sn``)."""
        return "per_op" if "coll_sn" in self.labels else "v5"


@dataclass
class _OpSamples:
    """The samples of one operation: the first one's labels and line, each metric's value."""

    labels: dict[str, str]
    line: int
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class PromFile:
    source: str
    samples: list[PromSample] = field(default_factory=list)

    def ops(self) -> NcclOps:
        """The per-operation samples (2.29.7 format) as rows: one per (communicator, rank,
        coll_sn), the execution time from ``nccl_collective_exec_time_microseconds``, the end
        at the sample's timestamp (to the second)."""
        by_op: dict[tuple[int, int, int, str], _OpSamples] = {}
        for s in self.samples:
            if s.format != "per_op":
                continue
            lab = s.labels
            try:
                key = (comm_hash(lab["comm_id"]), int(lab["rank"]), int(lab["coll_sn"]),
                       lab.get("collective", ""))
            except (KeyError, ValueError):
                continue
            row = by_op.setdefault(key, _OpSamples(lab, s.line))
            row.values[s.metric] = s.value
        recs = []
        for (comm, rank, sn, coll), row in by_op.items():
            lab = row.labels
            stamp = _iso_us(lab.get("timestamp", ""))
            if stamp is None:
                continue
            exe = row.values.get("nccl_collective_exec_time_microseconds")
            # the process is not named: the GPU stands for it (one process per GPU)
            gpu = re.fullmatch(r"GPU(\d+)", lab.get("gpu_device_id", ""))
            pid = -1 - int(gpu.group(1)) if gpu else -1
            nranks = int(lab.get("nranks", lab.get("n_ranks", "0")) or 0)
            recs.append(OpRecord(
                self.source, row.line,
                CommKey(comm, rank, nranks, int(lab.get("n_nodes", "0") or 0)),
                lab.get("hostname", ""), pid, "", stamp, op_name(coll), coll, sn, -1,
                _size(lab.get("message_size", "")),
                None if exe is None or not math.isfinite(float(exe)) else round(float(exe)),
                None, math.nan, float(row.values.get("nccl_bus_bandwidth_gbs", math.nan)),
                None, None, None))
        return NcclOps.from_records(recs, self.source)


def _iso_us(stamp: str) -> int | None:
    try:
        return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) * 1_000_000
    except ValueError:
        return None


def _size(text: str) -> int:
    """``2.00GB`` (2.29.7) or ``4-5GB`` (2.30, the bucket's floor) in bytes; 0 if unreadable."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:-\d+)?([KMGT]?B)", text.strip())
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def parse_prom(text: str, source: str = "", problems: Problems | None = None) -> PromFile:
    problems = problems if problems is not None else Problems()
    out = PromFile(source)
    for no, raw in enumerate(text.split("\n"), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        m = _SAMPLE.match(s)
        if m is None:
            # a line with only labels (the 2.29.7 README's example) is not a sample
            problems.add(source, no, "prom_line", f"not a Prometheus sample: {s[:60]!r} "
                         "(skipped)")
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        try:
            value = float(m.group(3))
        except ValueError:
            problems.add(source, no, "prom_value", f"value {m.group(3)!r} is not a number "
                         "(skipped)")
            continue
        out.samples.append(PromSample(m.group(1), labels, value, no))
    return out


def parse_labels(text: str) -> dict[str, str]:
    """The labels of a bare label list (``a="x",b="y"``)."""
    return dict(_LABEL.findall(text))


def read_prom_file(path: str | Path, problems: Problems | None = None) -> PromFile:
    p = Path(path)
    return parse_prom(p.read_text(errors="replace"), str(p), problems)
