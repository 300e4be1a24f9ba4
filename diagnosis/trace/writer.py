"""Writer of telemetry traces (shared specs section 2, JSON Lines), format versions 1 and 2."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson

from c4.proto.codec import STATUS_NAMES, Columns
from c4.proto.health import HealthRecord
from diagnosis.engine.records import (
    PORT_COUNTERS,
    ConnRecords,
    LinkStatRecords,
    PortRecords,
    ProgressRecords,
)
from diagnosis.trace.reader_v2 import LINK_COUNTS


class TraceWriter:
    """Write records in the order given; ``rank`` and ``group`` records must come before the ops
    that use them. Optional fields with their default value are left out."""

    def __init__(self, target: str | Path | BinaryIO) -> None:
        if isinstance(target, (str, Path)):
            self._fh: BinaryIO = open(target, "wb")  # noqa: SIM115 - closed by close()
            self._owned = True
        else:
            self._fh, self._owned = target, False
        self.lines = 0

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._fh.close()
        else:
            self._fh.flush()

    def _write(self, obj: dict[str, Any]) -> None:
        self._fh.write(orjson.dumps(obj) + b"\n")
        self.lines += 1

    def _write_all(self, objs: Iterable[dict[str, Any]]) -> None:
        lines = [orjson.dumps(o) for o in objs]
        if lines:
            self._fh.write(b"\n".join(lines) + b"\n")
            self.lines += len(lines)

    def meta(self, job: str | None = None, version: int = 1, sample: int = 1) -> None:
        """The first line. A ``sample`` above 1 (the trace keeps the calls that
        ``c4.proto.sampling`` keeps at that factor) makes it a version 2 trace."""
        if version not in (1, 2):
            raise ValueError(f"trace format version must be 1 or 2, got {version!r}")
        if int(sample) < 1:
            raise ValueError(f"sample must be at least 1 (1: every call), got {sample!r}")
        obj: dict[str, Any] = {"type": "meta", "version": 2 if sample > 1 else version}
        if job:
            obj["job"] = job
        if sample > 1:
            obj["sample"] = int(sample)
        self._write(obj)

    def rank(self, rank: int, host: str, gpu: str | None = None, nic: str | None = None) -> None:
        obj: dict[str, Any] = {"type": "rank", "rank": int(rank), "host": host}
        if gpu:
            obj["gpu"] = gpu
        if nic:
            obj["nic"] = nic
        self._write(obj)

    def group(self, pg: str, ranks: Sequence[int]) -> None:
        self._write({"type": "group", "pg": pg, "ranks": [int(r) for r in ranks]})

    def op(self, rank: int, pg: str, seq: int, op: str, nbytes: int, t_enter_ns: int,
           t_end_ns: int | None = None, *, t_start_ns: int | None = None, status: str = "ok",
           peer: int | None = None, dtype: str | None = None) -> None:
        obj: dict[str, Any] = {"type": "op", "rank": int(rank), "pg": pg, "seq": int(seq),
                               "op": op, "bytes": int(nbytes), "t_enter_ns": int(t_enter_ns)}
        if t_start_ns is not None and t_start_ns >= 0:
            obj["t_start_ns"] = int(t_start_ns)
        if t_end_ns is not None and t_end_ns >= 0:
            obj["t_end_ns"] = int(t_end_ns)
        if status != "ok":
            obj["status"] = status
        if peer is not None and peer >= 0:
            obj["peer"] = int(peer)
        if dtype:
            obj["dtype"] = dtype
        self._write(obj)

    def ops(self, cols: Columns) -> None:
        """A batch of op rows (``c4.proto.codec.OP_COLUMNS``)."""
        c = cols.columns
        names = cols.strings
        lines = []
        for rank, pg, seq, op, nb, dt, te, ts, tx, st, peer in zip(
                *(c[k].tolist() for k in ("rank", "pg", "seq", "op", "nbytes", "dtype",
                                          "t_enter_ns", "t_start_ns", "t_end_ns", "status",
                                          "peer"))):
            obj: dict[str, Any] = {"type": "op", "rank": rank, "pg": names[pg], "seq": seq,
                                   "op": names[op], "bytes": nb, "t_enter_ns": te}
            if ts >= 0:
                obj["t_start_ns"] = ts
            if tx >= 0:
                obj["t_end_ns"] = tx
            if st:
                obj["status"] = STATUS_NAMES[st]
            if peer >= 0:
                obj["peer"] = peer
            if names and names[dt]:
                obj["dtype"] = names[dt]
            lines.append(orjson.dumps(obj))
        if lines:
            self._fh.write(b"\n".join(lines) + b"\n")
            self.lines += len(lines)

    def conn(self, src: int, dst: int, nbytes: int, t_start_ns: int,
             t_end_ns: int | None = None, *, pg: str | None = None, seq: int | None = None,
             path: Sequence[str] | None = None, retrans: int | None = None) -> None:
        obj: dict[str, Any] = {"type": "conn", "src": int(src), "dst": int(dst),
                               "bytes": int(nbytes), "t_start_ns": int(t_start_ns)}
        if t_end_ns is not None and t_end_ns >= 0:
            obj["t_end_ns"] = int(t_end_ns)
        if pg is not None:
            obj["pg"] = pg
        if seq is not None and seq >= 0:
            obj["seq"] = int(seq)
        if path:
            obj["path"] = list(path)
        if retrans is not None and retrans >= 0:
            obj["retrans"] = int(retrans)
        self._write(obj)

    def conns(self, recs: ConnRecords) -> None:
        retrans = recs.retrans.tolist() if recs.retrans is not None else [None] * len(recs)
        for i, (s, d, b, ts, te, pg, sq, rt) in enumerate(zip(
                recs.src.tolist(), recs.dst.tolist(), recs.bytes.tolist(),
                recs.t_start_ns.tolist(), recs.t_end_ns.tolist(), recs.pg.tolist(),
                recs.seq.tolist(), retrans)):
            path = recs.paths[i] if recs.paths is not None else None
            self.conn(s, d, b, ts, te, pg=recs.strings[pg] if pg >= 0 else None, seq=sq,
                      path=path, retrans=rt)

    # ----- version 2 ------------------------------------------------------------------------
    def progress(self, rank: int, pg: str, t_ns: int, entered: int | None = None,
                 completed: int | None = None, *, op: str | None = None,
                 peer: int | None = None) -> None:
        """How far ``rank`` has got on ``pg`` at ``t_ns`` (for send/recv: per ``op`` and
        ``peer``); None or -1: no call entered / completed yet."""
        self._write(_progress(rank, pg, t_ns, entered, completed, op, peer))

    def progress_records(self, recs: ProgressRecords) -> None:
        names = recs.strings
        self._write_all(
            _progress(r, names[pg], t, e, c, names[op] if op >= 0 else None, peer)
            for r, pg, op, peer, t, e, c in zip(
                *(getattr(recs, k).tolist() for k in ("rank", "pg", "op", "peer", "t_ns",
                                                      "entered", "completed"))))

    def linkstat(self, src: int, dst: int, t_ns: int, window_ns: int, *,
                 pg: str | None = None, path: Sequence[str] | None = None,
                 transfers: int = 0, nbytes: int = 0, busy_ns: int = 0, max_ns: int = 0,
                 open_: int = 0, open_since_ns: int | None = None,
                 retrans: int | None = None) -> None:
        """One connection's transfers over the window of ``window_ns`` ending at ``t_ns``."""
        self._write(_linkstat(src, dst, t_ns, window_ns, pg, path,
                              {"transfers": transfers, "bytes": nbytes, "busy_ns": busy_ns,
                               "max_ns": max_ns, "open": open_},
                              open_since_ns, retrans))

    def linkstat_records(self, recs: LinkStatRecords) -> None:
        cols = [getattr(recs, k).tolist() for k in ("src", "dst", "t_ns", "window_ns", "pg",
                                                     "open_since_ns", "retrans")]
        counts = [getattr(recs, k).tolist() for k in LINK_COUNTS]
        paths = recs.paths if recs.paths is not None else [None] * len(recs)
        self._write_all(
            _linkstat(s, d, t, w, recs.strings[pg] if pg >= 0 else None, path,
                      dict(zip(LINK_COUNTS, c)), since, rt)
            for (s, d, t, w, pg, since, rt), c, path in zip(zip(*cols), zip(*counts), paths))

    def port(self, host: str, nic: str, t_ns: int, state: str, **counters: int | None) -> None:
        """A NIC port's ``state`` (``up`` or ``down``) and cumulative counters (names of
        ``PORT_COUNTERS``; None or -1: not read) at ``t_ns``."""
        self._write(_port(host, nic, t_ns, state, counters))

    def port_records(self, recs: PortRecords) -> None:
        names = recs.strings
        counters = {k: v.tolist() for k, v in recs.counters.items()}
        self._write_all(
            _port(names[h], names[c], t, "up" if up else "down",
                  {k: v[i] for k, v in counters.items()})
            for i, (h, c, t, up) in enumerate(zip(recs.host.tolist(), recs.nic.tolist(),
                                                  recs.t_ns.tolist(), recs.up.tolist())))

    def health(self, record: HealthRecord) -> None:
        """A node's health sample or event (this project's record kind)."""
        self._write(record.to_json())

    def end(self, t_ns: int) -> None:
        self._write({"type": "end", "t_ns": int(t_ns)})


def _put(obj: dict[str, Any], name: str, value: int | None, absent: int) -> None:
    """An optional non-negative integer field, left out at its default: ``absent``, None, or
    the -1 by which the record classes say "not given"."""
    if value is not None and value != absent and value >= 0:
        obj[name] = int(value)


def _progress(rank: int, pg: str, t_ns: int, entered: int | None, completed: int | None,
              op: str | None, peer: int | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": "progress", "rank": int(rank), "pg": pg, "t_ns": int(t_ns)}
    _put(obj, "entered", entered, -1)
    _put(obj, "completed", completed, -1)
    if op:
        obj["op"] = op
    _put(obj, "peer", peer, -1)
    return obj


def _linkstat(src: int, dst: int, t_ns: int, window_ns: int, pg: str | None,
              path: Sequence[str] | None, counts: dict[str, int], open_since_ns: int | None,
              retrans: int | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": "linkstat", "src": int(src), "dst": int(dst),
                           "t_ns": int(t_ns), "window_ns": int(window_ns)}
    if pg is not None:
        obj["pg"] = pg
    if path:
        obj["path"] = list(path)
    for name, value in counts.items():
        _put(obj, name, value, 0)
    if open_since_ns is not None and open_since_ns != -1:
        obj["open_since_ns"] = int(open_since_ns)
    _put(obj, "retrans", retrans, -1)
    return obj


def _port(host: str, nic: str, t_ns: int, state: str,
          counters: dict[str, int | None]) -> dict[str, Any]:
    if state not in ("up", "down"):
        raise ValueError(f"port state must be 'up' or 'down', got {state!r}")
    obj: dict[str, Any] = {"type": "port", "host": host, "nic": nic, "t_ns": int(t_ns),
                           "state": state}
    for name, value in counters.items():
        if name not in PORT_COUNTERS:
            raise ValueError(f"port counter {name!r} is not one of {', '.join(PORT_COUNTERS)}")
        _put(obj, name, value, -1)
    return obj
