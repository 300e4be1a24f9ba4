"""Writer of telemetry traces (shared specs section 2, JSON Lines)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson

from diagnosis.engine.records import ConnRecords
from proto.codec import STATUS_NAMES, Columns


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

    def meta(self, job: str | None = None) -> None:
        obj: dict[str, Any] = {"type": "meta", "version": 1}
        if job:
            obj["job"] = job
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
        """A batch of op rows (``proto.codec.OP_COLUMNS``)."""
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
             path: Sequence[str] | None = None) -> None:
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
        self._write(obj)

    def conns(self, recs: ConnRecords) -> None:
        for i, (s, d, b, ts, te, pg, sq) in enumerate(zip(
                recs.src.tolist(), recs.dst.tolist(), recs.bytes.tolist(),
                recs.t_start_ns.tolist(), recs.t_end_ns.tolist(), recs.pg.tolist(),
                recs.seq.tolist())):
            path = recs.paths[i] if recs.paths is not None else None
            self.conn(s, d, b, ts, te, pg=recs.strings[pg] if pg >= 0 else None, seq=sq,
                      path=path)

    def end(self, t_ns: int) -> None:
        self._write({"type": "end", "t_ns": int(t_ns)})
