"""Reading a simulated trace back for the simulator's tests, with a strict check of the fields
against shared specs section 2, versions 1 and 2 (independent of the analyzer's trace
reader)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diagnosis.sim import SimConfig, simulate

REQUIRED = {
    "meta": {"type", "version"},
    "rank": {"type", "rank", "host"},
    "group": {"type", "pg", "ranks"},
    "op": {"type", "rank", "pg", "seq", "op", "bytes", "t_enter_ns"},
    "conn": {"type", "src", "dst", "bytes", "t_start_ns"},
    "progress": {"type", "rank", "pg", "t_ns"},
    "linkstat": {"type", "src", "dst", "t_ns", "window_ns"},
    "port": {"type", "host", "nic", "t_ns", "state"},
    "end": {"type", "t_ns"},
}
OPTIONAL = {
    "meta": {"job", "sample"},
    "rank": {"gpu", "nic"},
    "group": set(),
    "op": {"t_start_ns", "t_end_ns", "status", "peer", "dtype"},
    "conn": {"t_end_ns", "pg", "seq", "path"},
    "progress": {"entered", "completed", "op", "peer"},
    "linkstat": {"pg", "path", "transfers", "bytes", "busy_ns", "max_ns", "open",
                 "open_since_ns", "retrans"},
    "port": {"link_downed", "symbol_errors", "rcv_errors", "xmit_discards", "retrans",
             "rx_bytes", "tx_bytes"},
    "end": set(),
}
V2_ONLY = {"progress", "linkstat", "port"}


@dataclass
class Trace:
    ranks: dict[int, dict] = field(default_factory=dict)
    groups: dict[str, list[int]] = field(default_factory=dict)
    ops: list[dict] = field(default_factory=list)
    conns: list[dict] = field(default_factory=list)
    progress: list[dict] = field(default_factory=list)
    linkstats: list[dict] = field(default_factory=list)
    ports: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    end_ns: int | None = None
    truth: dict = field(default_factory=dict)
    dir: Path = Path()

    def op_table(self) -> dict[str, np.ndarray]:
        """Ops as columns; missing times are -1."""
        def col(key: str, default: int = -1) -> np.ndarray:
            return np.array([o.get(key, default) if o.get(key) is not None else default
                             for o in self.ops], dtype=np.int64)
        out = {k: col(k) for k in ("rank", "seq", "bytes", "t_enter_ns", "t_start_ns",
                                   "t_end_ns", "peer")}
        out["pg"] = np.array([o["pg"] for o in self.ops], dtype=object)
        out["op"] = np.array([o["op"] for o in self.ops], dtype=object)
        return out

    def conn_table(self) -> dict[str, np.ndarray]:
        cols = {k: np.array([c.get(k) if c.get(k) is not None else -1 for c in self.conns],
                            dtype=np.int64)
                for k in ("src", "dst", "bytes", "t_start_ns", "t_end_ns", "seq")}
        cols["pg"] = np.array([c["pg"] for c in self.conns], dtype=object)
        cols["path"] = np.array([tuple(c["path"]) for c in self.conns] + [()],
                                dtype=object)[:-1]
        return cols


def read(path: Path) -> Trace:
    """Parse and check every line: known type, required fields, no unknown fields, rank/group
    records before the ops that use them, ``end`` last."""
    tr = Trace()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        for n, line in enumerate(fh, 1):
            rec = json.loads(line)
            kind = rec.get("type")
            assert kind in REQUIRED, f"line {n}: unknown type {kind!r}"
            keys = set(rec)
            assert REQUIRED[kind] <= keys, f"line {n}: missing {REQUIRED[kind] - keys}"
            assert keys <= REQUIRED[kind] | OPTIONAL[kind], \
                f"line {n}: unknown fields {keys - REQUIRED[kind] - OPTIONAL[kind]}"
            assert tr.end_ns is None, f"line {n} comes after the end record"
            assert kind not in V2_ONLY or tr.meta.get("version") == 2, \
                f"line {n}: a {kind} record in a version 1 trace"
            for k, v in rec.items():
                assert k in ("type", "pg", "op", "host", "nic", "state", "job", "path",
                             "ranks", "gpu", "status") or (isinstance(v, int)
                                                           and not isinstance(v, bool)), \
                    f"line {n}: field {k} is not an integer: {v!r}"
            if kind == "meta":
                assert n == 1 and rec["version"] in (1, 2)
                assert "sample" not in rec or (rec["version"] == 2 and rec["sample"] >= 1)
                tr.meta = rec
            elif kind == "rank":
                tr.ranks[rec["rank"]] = rec
            elif kind == "group":
                assert all(r in tr.ranks for r in rec["ranks"]), f"line {n}: unknown rank"
                tr.groups[rec["pg"]] = rec["ranks"]
            elif kind == "op":
                assert rec["rank"] in tr.ranks and rec["pg"] in tr.groups, f"line {n}"
                tr.ops.append(rec)
            elif kind == "conn":
                tr.conns.append(rec)
            elif kind == "progress":
                assert rec["rank"] in tr.ranks and rec["pg"] in tr.groups, f"line {n}"
                assert ("op" in rec) == ("peer" in rec) and rec.get("op") in (None, "send",
                                                                              "recv")
                assert "entered" in rec and rec.get("completed", -1) <= rec["entered"]
                tr.progress.append(rec)
            elif kind == "linkstat":
                assert rec["window_ns"] > 0 and (rec.get("transfers") or rec.get("open"))
                assert ("open_since_ns" in rec) == bool(rec.get("open")), f"line {n}"
                tr.linkstats.append(rec)
            elif kind == "port":
                assert rec["state"] in ("up", "down") and rec["nic"].startswith(rec["host"])
                tr.ports.append(rec)
            else:
                tr.end_ns = rec["t_ns"]
    assert tr.end_ns is not None, "no end record"
    return tr


def run(tmp: Path, **kw: object) -> Trace:
    """Simulate into ``tmp`` and read everything back."""
    res = simulate(SimConfig(**kw), tmp)  # type: ignore[arg-type]
    tr = read(res.trace)
    tr.truth = json.loads(res.truth.read_text())
    tr.dir = tmp
    return tr
