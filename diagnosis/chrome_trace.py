"""A job's calls and faults as a Chrome trace-event JSON file: the format Perfetto
(ui.perfetto.dev) and chrome://tracing open.

Layout: one process per host, one thread per rank; each call is a complete event (``"ph": "X"``)
from its enter to its end, a call still open when recording stopped lasts until then (a hang is
a long bar, ``args.open`` true). Calls of one rank that overlap without nesting (asynchronous
sends and receives, several process groups) cannot share a thread in this format, so they go
to extra threads named after the rank ("rank 3, overlapping 1"), sorted next to it. Faults are
instant events with their ids (globally, and on the thread of each suspect rank) and spans on a
"c4 faults" process, one thread per fault, with their suspects and summary in ``args``.

Times are microseconds since the job's first call (``otherData.t0_ns``, the wall clock of 0).
A large job is bounded: a time window (``since_s``/``until_s``) and at most ``max_calls`` calls,
the ones nearest the first fault's onset when there are more (``ChromeTraceSummary`` says which
window was written).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from c4.proto.codec import STATUS_NAMES, Columns
from c4.report import FaultReport, suspect_ranks
from c4.topology.model import natural_key
from diagnosis.errors import DiagnosisError

#: calls written by default: about 150 MB of JSON, which Perfetto's UI opens in a browser tab
DEFAULT_MAX_CALLS = 1_000_000
#: the process that holds the faults' spans; hosts are numbered from 1
FAULTS_PID = 0
#: thread ids of the overlap lanes of rank r: r + k * LANE_STRIDE for lane k
LANE_STRIDE = 1 << 20


class ChromeTraceError(DiagnosisError):
    """The requested export cannot be written (bad window, unwritable file)."""


@dataclass
class ChromeTraceSummary:
    calls: int = 0              # calls written
    calls_total: int = 0        # calls the job has
    faults: int = 0
    hosts: int = 0
    ranks: int = 0
    lanes: int = 0              # extra threads for overlapping calls
    window_s: tuple[float, float] = (0.0, 0.0)   # seconds since the first call, written
    cut: bool = False           # more calls than max_calls: the window was narrowed
    notes: list[str] = field(default_factory=list)


def _us(ns: np.ndarray | int, t0: int) -> Any:
    return (ns - t0) / 1e3


def _window(ops: Columns, t0: int, end_ns: int, since_s: float | None, until_s: float | None,
            max_calls: int, faults: list[FaultReport], out: ChromeTraceSummary) -> np.ndarray:
    """Indices of the calls to write, in enter order."""
    enter = ops["t_enter_ns"]
    lo = t0 + int((since_s or 0.0) * 1e9)
    hi = end_ns if until_s is None else t0 + int(until_s * 1e9)
    if hi < lo:
        raise ChromeTraceError(f"the window ends ({until_s} s) before it starts ({since_s} s): "
                               "give --until later than --since")
    end = np.where(ops["t_end_ns"] >= 0, ops["t_end_ns"], end_ns)
    idx = np.flatnonzero((end >= lo) & (enter <= hi))
    # by enter, the longer first of two entered together: the order in which a viewer nests
    idx = idx[np.lexsort((-end[idx], enter[idx]))]
    if len(idx) > max_calls:
        out.cut = True
        onsets = [f.first_seen_ns for f in faults if lo <= f.first_seen_ns <= hi]
        centre = min(onsets) if onsets else int(enter[idx[-1]])
        mid = int(np.searchsorted(enter[idx], centre))
        first = min(max(0, mid - max_calls // 2), len(idx) - max_calls)
        idx = idx[first:first + max_calls]
        lo, hi = int(enter[idx[0]]), int(enter[idx[-1]])
        out.notes.append(
            f"{out.calls_total:,} calls are more than --max-calls {max_calls:,}: wrote those "
            f"entered from {(lo - t0) / 1e9:.3f} s to {(hi - t0) / 1e9:.3f} s after the first "
            "call" + (", around the first fault's onset" if onsets else ", the last ones")
            + "; choose another window with --since/--until or raise --max-calls")
    out.window_s = ((lo - t0) / 1e9, (min(hi, end_ns) - t0) / 1e9)
    return idx


def _lanes(rank: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Per call (sorted by start), its overlap lane: 0 unless it overlaps an earlier call of
    its rank without nesting inside it (the format draws such calls wrongly on one thread)."""
    lane = np.zeros(len(rank), dtype=np.int64)
    # most ranks call one thing at a time: only ranks with a call that starts before the
    # previous one ended need the stacking below
    order = np.lexsort((-stop, start, rank))
    r, a, b = rank[order], start[order], stop[order]
    overlap = np.zeros(len(r), dtype=bool)
    overlap[1:] = (r[1:] == r[:-1]) & (a[1:] < np.maximum.accumulate(b)[:-1])
    busy = set(r[overlap].tolist())
    if not busy:
        return lane
    stacks: dict[int, list[list[int]]] = {}
    for i in np.flatnonzero(np.isin(r, list(busy))).tolist():
        lanes = stacks.setdefault(int(r[i]), [])
        t0, t1 = int(a[i]), int(b[i])
        for k, stack in enumerate(lanes):
            while stack and stack[-1] <= t0:
                stack.pop()
            if not stack or t1 <= stack[-1]:
                stack.append(t1)
                lane[order[i]] = k
                break
        else:
            lanes.append([t1])
            lane[order[i]] = len(lanes) - 1
    return lane


def _fault_args(f: FaultReport) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f.id, "kind": f.kind, "state": f.state, "summary": f.summary,
                           "suspects": [s.to_json() for s in f.suspects]}
    if f.pg is not None:
        out["pg"] = f.pg
    if f.seq is not None:
        out["seq"] = int(f.seq)
    return out


def chrome_events(ops: Columns, faults: list[FaultReport], hosts: dict[int, str], *,
                  gpus: dict[int, str] | None = None, end_ns: int | None = None,
                  since_s: float | None = None, until_s: float | None = None,
                  max_calls: int = DEFAULT_MAX_CALLS,
                  summary: ChromeTraceSummary | None = None) -> Iterator[dict[str, Any]]:
    """The trace events, metadata first. ``end_ns``: when recording stopped (calls still open
    then end there); default the last time in ``ops`` or the faults."""
    out = summary if summary is not None else ChromeTraceSummary()
    if max_calls < 1:
        raise ChromeTraceError(f"--max-calls {max_calls} writes nothing: give 1 or more")
    gpus = gpus or {}
    out.calls_total = len(ops)
    times = [int(f.first_seen_ns) for f in faults] + [int(f.last_seen_ns) for f in faults]
    if len(ops):
        times += [int(ops["t_enter_ns"].min()), int(ops["t_enter_ns"].max()),
                  int(ops["t_end_ns"].max())]
    if not times:
        raise ChromeTraceError("the job has no calls and no faults: nothing to draw")
    t0 = int(ops["t_enter_ns"].min()) if len(ops) else min(times)
    end = int(end_ns) if end_ns else max(times)
    end = max(end, max(times))
    idx = _window(ops, t0, end, since_s, until_s, max_calls, faults, out) if len(ops) \
        else np.empty(0, dtype=np.int64)
    rank = ops["rank"][idx].astype(np.int64)
    enter = ops["t_enter_ns"][idx]
    open_ = ops["t_end_ns"][idx] < 0
    stop = np.where(open_, end, ops["t_end_ns"][idx])
    lane = _lanes(rank, enter, stop)
    ranks = sorted(set(rank.tolist()) | set(hosts) | {r for f in faults
                                                       for r in suspect_ranks(f)})
    host_names = sorted({hosts.get(r, "unknown host") for r in ranks}, key=natural_key)
    pid_of_host = {h: i + 1 for i, h in enumerate(host_names)}
    pid = {r: pid_of_host[hosts.get(r, "unknown host")] for r in ranks}
    out.hosts, out.ranks = len(host_names), len(ranks)
    yield {"name": "process_name", "ph": "M", "pid": FAULTS_PID, "tid": 0,
           "args": {"name": "c4 faults"}}
    yield {"name": "process_sort_index", "ph": "M", "pid": FAULTS_PID, "tid": 0,
           "args": {"sort_index": 0}}
    for h, p in pid_of_host.items():
        yield {"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": h}}
        yield {"name": "process_sort_index", "ph": "M", "pid": p, "tid": 0,
               "args": {"sort_index": p}}
    for r in ranks:
        name = f"rank {r}" + (f" ({gpus[r]})" if r in gpus else "")
        yield {"name": "thread_name", "ph": "M", "pid": pid[r], "tid": r,
               "args": {"name": name}}
        yield {"name": "thread_sort_index", "ph": "M", "pid": pid[r], "tid": r,
               "args": {"sort_index": r * 64}}
    for r, k in sorted(set(zip(rank[lane > 0].tolist(), lane[lane > 0].tolist(),
                               strict=True))):
        tid = r + k * LANE_STRIDE
        yield {"name": "thread_name", "ph": "M", "pid": pid[r], "tid": tid,
               "args": {"name": f"rank {r}, overlapping {k}"}}
        yield {"name": "thread_sort_index", "ph": "M", "pid": pid[r], "tid": tid,
               "args": {"sort_index": r * 64 + min(k, 63)}}
        out.lanes += 1
    yield from _call_events(ops, idx, t0, pid, rank, enter, stop, open_, lane, out)
    yield from _fault_events(faults, t0, pid, out)


def _call_events(ops: Columns, idx: np.ndarray, t0: int, pid: dict[int, int], rank: np.ndarray,
                 enter: np.ndarray, stop: np.ndarray, open_: np.ndarray, lane: np.ndarray,
                 out: ChromeTraceSummary) -> Iterator[dict[str, Any]]:
    names = np.asarray(ops.strings, dtype=object)
    cols = zip(rank.tolist(), (rank + lane * LANE_STRIDE).tolist(),
               names[ops["op"][idx]].tolist() if len(names) else [""] * len(idx),
               names[ops["pg"][idx]].tolist() if len(names) else [""] * len(idx),
               ops["seq"][idx].tolist(), ops["nbytes"][idx].tolist(),
               ops["peer"][idx].tolist(), ops["status"][idx].tolist(),
               # to the nanosecond: a call that starts as another ends does not overlap it
               # by a rounding error (viewers then nest it wrongly)
               np.round(_us(enter, t0), 3).tolist(), np.round((stop - enter) / 1e3, 3).tolist(),
               open_.tolist(),
               ops["t_start_ns"][idx].tolist(), enter.tolist(), strict=True)
    for r, tid, op, pg, seq, nbytes, peer, status, ts, dur, is_open, started, entered in cols:
        args: dict[str, Any] = {"pg": pg, "seq": seq, "bytes": nbytes,
                                "status": STATUS_NAMES[status]}
        if peer >= 0:
            args["peer"] = peer
        if started >= 0:
            args["queued_us"] = (started - entered) / 1e3
        if is_open:
            args["open"] = True
        yield {"name": op + (" (open)" if is_open else ""), "cat": "p2p" if peer >= 0
               else "collective", "ph": "X", "ts": ts, "dur": max(dur, 0.0), "pid": pid[r],
               "tid": tid, "args": args}
        out.calls += 1


def _fault_events(faults: list[FaultReport], t0: int, pid: dict[int, int],
                  out: ChromeTraceSummary) -> Iterator[dict[str, Any]]:
    for n, f in enumerate(sorted(faults, key=lambda f: f.first_seen_ns), start=1):
        name = f"{f.kind} {f.id}".strip()
        args = _fault_args(f)
        ts = _us(int(f.first_seen_ns), t0)
        yield {"name": "thread_name", "ph": "M", "pid": FAULTS_PID, "tid": n,
               "args": {"name": name}}
        yield {"name": name, "cat": "fault", "ph": "X", "ts": ts,
               "dur": max(_us(int(max(f.last_seen_ns, f.first_seen_ns)), t0) - ts, 0.0),
               "pid": FAULTS_PID, "tid": n, "args": args}
        yield {"name": name, "cat": "fault", "ph": "i", "s": "g", "ts": ts,
               "pid": FAULTS_PID, "tid": n, "args": args}
        for r in suspect_ranks(f):
            if r in pid:
                yield {"name": name, "cat": "fault", "ph": "i", "s": "t", "ts": ts,
                       "pid": pid[r], "tid": r, "args": args}
        out.faults += 1


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")


def write_chrome_trace(path: str | Path, job: str, ops: Columns, faults: Iterable[FaultReport],
                       hosts: dict[int, str], *, gpus: dict[int, str] | None = None,
                       end_ns: int | None = None, since_s: float | None = None,
                       until_s: float | None = None, max_calls: int = DEFAULT_MAX_CALLS,
                       ) -> ChromeTraceSummary:
    """Write the Chrome trace of a job to ``path`` (gzip-compressed if it ends in .gz, which
    Perfetto opens as it is). Events are streamed: memory stays that of ``ops``."""
    faults = list(faults)
    out = ChromeTraceSummary()
    events = chrome_events(ops, faults, hosts, gpus=gpus, end_ns=end_ns, since_s=since_s,
                           until_s=until_s, max_calls=max_calls, summary=out)
    first = next(events)            # errors about the request before a file is made
    t0 = int(ops["t_enter_ns"].min()) if len(ops) else min(
        int(f.first_seen_ns) for f in faults)
    path = Path(path)
    try:
        fh: IO[str] = _open(path)
    except OSError as exc:
        raise ChromeTraceError(f"cannot write {path}: {exc.strerror}") from exc
    with fh:
        fh.write('{"displayTimeUnit":"ms","traceEvents":[\n')
        fh.write(json.dumps(first, separators=(",", ":")))
        for e in events:
            fh.write(",\n")
            fh.write(json.dumps(e, separators=(",", ":")))
        other = {"job": job, "t0_ns": t0, "t0_utc": dt.datetime.fromtimestamp(
            t0 / 1e9, dt.timezone.utc).isoformat(), "calls": out.calls,
            "calls_total": out.calls_total, "window_s": list(out.window_s),
            "producer": "c4"}
        fh.write("\n],\"otherData\":" + json.dumps(other) + "}\n")
    return out
