"""Streams a simulation to a trace file (shared specs section 2, JSON Lines), batch by batch."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import TextIO

import numpy as np

from c4.proto.codec import STATUS_NAMES
from diagnosis.sim.model import Simulation

_OP = ('{"type":"op","rank":%d,"pg":"%s","seq":%d,"op":"%s","bytes":%d,"t_enter_ns":%d,'
       '"t_start_ns":%d,"t_end_ns":%d}\n')
_OP_PEER = ('{"type":"op","rank":%d,"pg":"%s","seq":%d,"op":"%s","bytes":%d,"t_enter_ns":%d,'
            '"t_start_ns":%d,"t_end_ns":%d,"peer":%d}\n')
_OPEN_CONN = ('{"type":"conn","src":%d,"dst":%d,"bytes":%d,"t_start_ns":%d,"pg":"%s",'
              '"seq":%d%s}\n')
_CONN = ('{"type":"conn","src":%d,"dst":%d,"bytes":%d,"t_start_ns":%d,"t_end_ns":%d,'
         '"pg":"%s","seq":%d%s}\n')


def open_trace(path: str | Path, compress: bool = False) -> TextIO:
    if compress or str(path).endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=1), encoding="utf-8")
    return open(path, "w", encoding="utf-8", buffering=1 << 20)


class TraceWriter:
    """Writes the header (meta, rank and group records), one iteration's records at a time, and
    the closing ``end`` record. Counts what it wrote."""

    def __init__(self, out: TextIO, sim: Simulation) -> None:
        self.out, self.sim = out, sim
        self.strings = np.asarray(sim.strings, dtype=object)
        self.n_ops = self.n_conns = 0

    def header(self, sample: int | None = None) -> None:
        """The meta record (version 2 with ``sample`` when the trace is reduced), then the
        rank and group records."""
        lay, w = self.sim.lay, self.out.write
        meta: dict[str, object] = {"type": "meta", "version": 1, "job": self.sim.cfg.job}
        if sample is not None:
            meta.update(version=2, sample=sample)
        w(json.dumps(meta) + "\n")
        w("".join(f'{{"type":"rank","rank":{r},"host":"{lay.hosts[h]}","gpu":"{g}","nic":"{n}"}}\n'
                  for r, (h, g, n) in enumerate(zip(lay.host_of.tolist(), lay.gpu, lay.nic))))
        w("".join(json.dumps({"type": "group", "pg": pg, "ranks": ranks},
                             separators=(",", ":")) + "\n" for pg, ranks in lay.groups))

    def rows(self, ops: dict[str, np.ndarray], conns: dict[str, np.ndarray]) -> None:
        """Op and conn rows (columns as in :class:`diagnosis.sim.model.Batch`)."""
        self._ops(ops)
        self._conns(conns)

    def end(self) -> None:
        self.out.write(f'{{"type":"end","t_ns":{self.sim.end_ns}}}\n')

    def _ops(self, o: dict[str, np.ndarray]) -> None:
        n = len(o["rank"])
        if not n:
            return
        self.n_ops += n
        plain = (o["t_start_ns"] >= 0) & (o["t_end_ns"] >= 0) & (o["status"] == 0)
        p2p = o["peer"] >= 0
        pg = self.strings[o["pg"]]
        op = self.strings[o["op"]]
        cols = ("rank", "seq", "nbytes", "t_enter_ns", "t_start_ns", "t_end_ns", "peer")
        lines = np.empty(n, dtype=object)        # keep the rows' order across templates
        for mask, fmt, with_peer in ((plain & ~p2p, _OP, False), (plain & p2p, _OP_PEER, True)):
            if not mask.any():
                continue
            r, sq, nb, te, ts, tn, pe = (o[k][mask].tolist() for k in cols)
            rows = zip(r, pg[mask].tolist(), sq, op[mask].tolist(), nb, te, ts, tn, pe)
            lines[mask] = [fmt % row for row in rows] if with_peer else \
                [fmt % row[:8] for row in rows]
        for j in np.flatnonzero(~plain).tolist():
            rec: dict[str, object] = {
                "type": "op", "rank": int(o["rank"][j]), "pg": pg[j], "seq": int(o["seq"][j]),
                "op": op[j], "bytes": int(o["nbytes"][j]), "t_enter_ns": int(o["t_enter_ns"][j])}
            for k in ("t_start_ns", "t_end_ns"):
                if o[k][j] >= 0:
                    rec[k] = int(o[k][j])
            if o["status"][j]:
                rec["status"] = STATUS_NAMES[int(o["status"][j])]
            if o["peer"][j] >= 0:
                rec["peer"] = int(o["peer"][j])
            lines[j] = json.dumps(rec, separators=(",", ":")) + "\n"
        self.out.write("".join(lines.tolist()))

    def _conns(self, c: dict[str, np.ndarray]) -> None:
        n = len(c["conn"])
        if not n:
            return
        self.n_conns += n
        net = self.sim.conns
        idx = c["conn"]
        src, dst = net.src[idx], net.dst[idx]
        pg = self.strings[c["pg"]]
        paths = [f',"path":{net.path_json[k]}' for k in idx.tolist()] if self.sim.cfg.paths \
            else [""] * n
        done = c["t_end_ns"] >= 0
        lines = np.empty(n, dtype=object)
        if done.any():
            rows = zip(src[done].tolist(), dst[done].tolist(), c["bytes"][done].tolist(),
                       c["t_start_ns"][done].tolist(), c["t_end_ns"][done].tolist(),
                       pg[done].tolist(), c["seq"][done].tolist(),
                       [p for p, d in zip(paths, done.tolist()) if d])
            lines[done] = [_CONN % row for row in rows]
        for j in np.flatnonzero(~done).tolist():
            lines[j] = _OPEN_CONN % (src[j], dst[j], c["bytes"][j], c["t_start_ns"][j], pg[j],
                                     c["seq"][j], paths[j])
        self.out.write("".join(lines.tolist()))
