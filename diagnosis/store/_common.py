"""What both store backends share: fault (de)serialisation, job summaries, building Columns."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from c4.proto.codec import CONN_COLUMNS, OP_COLUMNS, Columns
from c4.report import FaultReport, Suspect
from diagnosis.store.api import JobRecord

# Op columns that index the string table, and the integer ones, in OP_COLUMNS order.
OP_STRING_COLUMNS = ("pg", "op", "dtype")
CONN_STRING_COLUMNS = ("local", "remote")


def fault_to_text(report: FaultReport) -> str:
    """Every field of a report, losslessly (``to_json`` rounds scores and drops None fields)."""
    return json.dumps({
        "kind": report.kind,
        "suspects": [[s.type, s.id, float(s.score), None if s.rank is None else int(s.rank)]
                     for s in report.suspects],
        "first_seen_ns": int(report.first_seen_ns),
        "summary": report.summary,
        "pg": report.pg,
        "seq": None if report.seq is None else int(report.seq),
        # to_json turns numpy values and tuples in the evidence into plain JSON
        "evidence": report.to_json()["evidence"],
        "id": report.id,
        "job": report.job,
        "last_seen_ns": int(report.last_seen_ns),
        "state": report.state,
        "revision": int(report.revision),
        # the health findings joined to the report (diagnosis/health/causes.py)
        "causes": report.to_json().get("causes", []),
    }, separators=(",", ":"))


def fault_from_text(text: str) -> FaultReport:
    obj: dict[str, Any] = json.loads(text)
    suspects = tuple(Suspect(type=t, id=i, score=s, rank=r) for t, i, s, r in obj["suspects"])
    return FaultReport(
        kind=obj["kind"], suspects=suspects, first_seen_ns=obj["first_seen_ns"],
        summary=obj["summary"], pg=obj["pg"], seq=obj["seq"], evidence=obj["evidence"],
        id=obj["id"], job=obj["job"], last_seen_ns=obj["last_seen_ns"], state=obj["state"],
        revision=obj["revision"], causes=tuple(obj.get("causes") or ()),
    )


@dataclass
class RankAgg:
    """Per job attempt: what the registered ranks say."""

    world_size: int
    ranks_seen: int
    hosts: set[str]
    first_ns: int  # earliest registration time, 0 when unknown
    last_ns: int


@dataclass
class OpAgg:
    ops: int
    first_ns: int
    last_ns: int


def build_jobs(ranks: dict[tuple[str, int], RankAgg],
               ops: dict[tuple[str, int], OpAgg]) -> list[JobRecord]:
    """Job summaries, newest first: by when the attempt began (its first op, else its first
    registration), then job name, then the higher attempt."""
    out: list[JobRecord] = []
    for (job, attempt), r in ranks.items():
        o = ops.get((job, attempt))
        starts = [t for t in (r.first_ns, o.first_ns if o and o.ops else 0) if t > 0]
        ends = [t for t in (r.last_ns, o.last_ns if o and o.ops else 0) if t > 0]
        out.append(JobRecord(
            job=job, attempt=attempt, world_size=r.world_size, ranks_seen=r.ranks_seen,
            hosts=tuple(sorted(r.hosts)), ops=o.ops if o else 0,
            first_ns=min(starts) if starts else 0, last_ns=max(ends) if ends else 0,
        ))
    out.sort(key=lambda j: (-j.first_ns, j.job, -j.attempt))
    return out


def intern_strings(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Strings -> (uint32 indices, fresh sorted string table). A dict lookup per value mapped
    in C: many times faster than np.unique's sort of Python objects."""
    table = sorted(set(values))
    lookup = {s: i for i, s in enumerate(table)}
    idx = np.fromiter(map(lookup.__getitem__, values), dtype=np.uint32, count=len(values))
    return idx, table


def columns_from_lists(spec: dict[str, np.dtype], string_columns: Sequence[str],
                       data: dict[str, Sequence[Any]]) -> Columns:
    """Query results (one sequence per column, strings as str) -> Columns with one fresh string
    table shared by ``string_columns``."""
    n = len(data[next(iter(spec))])
    idx, table = intern_strings(list(chain.from_iterable(data[c] for c in string_columns)))
    out: dict[str, np.ndarray] = {}
    for name, dtype in spec.items():
        if name in string_columns:
            k = string_columns.index(name)
            out[name] = idx[k * n:(k + 1) * n]
        else:
            out[name] = np.asarray(data[name], dtype=dtype).reshape(-1)
    return Columns(out, table)


def op_columns(data: dict[str, Sequence[Any]], errors: Sequence[str | None]) -> Columns:
    cols = columns_from_lists(OP_COLUMNS, OP_STRING_COLUMNS, data)
    cols.error_text = {i: e for i, e in enumerate(errors) if e}
    return cols


def conn_columns(data: dict[str, Sequence[Any]]) -> Columns:
    return columns_from_lists(CONN_COLUMNS, CONN_STRING_COLUMNS, data)


def names_of(cols: Columns, column: str) -> list[str]:
    """The strings one column points at, as a list (vectorised lookup)."""
    table = np.asarray(cols.strings, dtype=object)
    if len(cols) == 0:
        return []
    return table[np.asarray(cols.columns[column], dtype=np.intp)].tolist()


def error_list(cols: Columns) -> list[str]:
    """Per row error text, '' where none; only rows with text cost Python work."""
    out = [""] * len(cols)
    for row, text in cols.error_text.items():
        out[row] = text
    return out


def newest_first(reports: Iterable[FaultReport], *, open_only: bool, limit: int
                 ) -> list[FaultReport]:
    picked = [r for r in reports if not open_only or r.state == "open"]
    picked.sort(key=lambda r: (-r.first_seen_ns, r.id))
    return picked[:limit] if limit > 0 else picked
