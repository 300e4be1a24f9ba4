"""Building the reducer's columnar input from plain rows, and reading its output back as dicts
(for hand-computed expectations)."""

from __future__ import annotations

import numpy as np

from c4.proto.codec import Columns
from c4.reduce import Reduced

OP_KEYS = ("rank", "pg", "seq", "op", "t_enter_ns", "t_end_ns", "status", "peer")


def ops(rows: list[dict], strings: list[str]) -> Columns:
    """Op rows as dicts with names for pg/op; t_end_ns None: open; status 0 unless given."""
    def col(key: str, default: int = -1) -> np.ndarray:
        out = []
        for r in rows:
            v = r.get(key, default)
            if key in ("pg", "op"):
                v = strings.index(v)
            out.append(-1 if v is None else v)
        return np.asarray(out, dtype=np.int64)

    cols = {k: col(k, 0 if k == "status" else -1) for k in OP_KEYS}
    cols["nbytes"] = np.zeros(len(rows), np.int64)
    return Columns(cols, strings)


def transfers(rows: list[dict], strings: list[str] | None = None) -> Columns:
    strings = strings or []
    keys = ("src", "dst", "bytes", "t_start_ns", "t_end_ns", "path", "retrans")
    cols = {k: np.asarray([-1 if r.get(k) is None else r[k] for r in rows], dtype=np.int64)
            for k in keys}
    if any("pg" in r for r in rows):
        cols["pg"] = np.asarray([strings.index(r["pg"]) if r.get("pg") else -1 for r in rows],
                                dtype=np.int64)
    return Columns(cols, strings)


def progress(out: Reduced) -> list[dict]:
    p = out.progress
    names = p.strings
    rows = []
    for i in range(len(p)):
        rec = {"rank": int(p["rank"][i]), "pg": names[p["pg"][i]], "t_ns": int(p["t_ns"][i])}
        if p["op"][i] >= 0:
            rec["op"] = names[p["op"][i]]
            rec["peer"] = int(p["peer"][i])
        for k in ("entered", "completed"):
            if p[k][i] >= 0:
                rec[k] = int(p[k][i])
        rows.append(rec)
    return rows


def linkstats(out: Reduced) -> list[dict]:
    ls = out.linkstat
    return [{k: (ls.strings[v] if k == "pg" and v >= 0 else int(v))
             for k, v in ((k, ls[k][i]) for k in ls.columns)} for i in range(len(ls))]
