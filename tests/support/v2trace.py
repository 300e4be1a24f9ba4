"""Turn a version 1 trace (all calls, conn records) into the reduced telemetry of format
version 2 (shared specs section 2): sampled calls, progress, linkstat instead of conn, and port
records, as a collector of a large job would ship them."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from c4.proto.sampling import is_sampled

S = 1_000_000_000


def to_v2(src: Path, dst: Path, *, sample: int = 1, window_ns: int = S, port_every: int = 5,
          keep_conn: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, int]:
    """Write ``src`` as a version 2 trace at ``dst``, rows in time order; return how many
    records of each type it holds. The conn records for which ``keep_conn`` is true stay conn
    records (a mix of both versions), the others become linkstat records."""
    recs = [json.loads(ln) for ln in Path(src).read_text().splitlines() if ln.strip()]
    meta = next((r for r in recs if r["type"] == "meta"), {})
    head = [{"type": "meta", "version": 2, "job": meta.get("job", "v2"), "sample": sample}]
    head += [r for r in recs if r["type"] in ("rank", "group")]
    end = max(r["t_ns"] for r in recs if r["type"] == "end")
    ops = [r for r in recs if r["type"] == "op"]
    rows = [r for r in ops if is_sampled(r["pg"], r["seq"], sample)]
    rows += progress(ops, window_ns)
    conns = [r for r in recs if r["type"] == "conn"]
    kept = [c for c in conns if keep_conn is not None and keep_conn(c)]
    rows += kept
    rows += linkstats([c for c in conns if not (keep_conn is not None and keep_conn(c))],
                      window_ns, end)
    rows += ports([r for r in recs if r["type"] == "rank"], ops, window_ns * port_every)
    rows.sort(key=_visible)
    out = head + rows + [{"type": "end", "t_ns": end}]
    Path(dst).write_text("".join(json.dumps(r) + "\n" for r in out))
    counts: dict[str, int] = defaultdict(int)
    for r in out:
        counts[r["type"]] += 1
    return dict(counts)


def _visible(r: dict[str, Any]) -> int:
    if r["type"] == "op":
        return r.get("t_end_ns", r["t_enter_ns"])
    if r["type"] == "conn":
        return r.get("t_end_ns", r["t_start_ns"])
    return r["t_ns"]


def _window_end(t: int, window_ns: int) -> int:
    return (t // window_ns + 1) * window_ns


def progress(ops: list[dict[str, Any]], window_ns: int) -> list[dict[str, Any]]:
    """Per rank and communicator (send/recv: per op and peer), the highest seq entered and
    completed, at the end of each window in which either changed."""
    events = defaultdict(list)
    for r in ops:
        key = (r["rank"], r["pg"], r["op"], r["peer"]) if "peer" in r else (r["rank"], r["pg"])
        events[key].append((r["t_enter_ns"], "entered", r["seq"]))
        if "t_end_ns" in r:
            events[key].append((r["t_end_ns"], "completed", r["seq"]))
    out = []
    for key, evs in events.items():
        high: dict[str, int] = {}
        shown: dict[str, int] = {}
        evs.sort()
        for i, (t, field, seq) in enumerate(evs):
            high[field] = max(high.get(field, -1), seq)
            w = _window_end(t, window_ns)
            if i + 1 < len(evs) and _window_end(evs[i + 1][0], window_ns) == w:
                continue            # the window goes on: one record at its end
            if high != shown:
                rec = {"type": "progress", "rank": key[0], "pg": key[1], "t_ns": w, **high}
                if len(key) == 4:
                    rec.update(op=key[2], peer=key[3])
                out.append(rec)
                shown = dict(high)
    return out


def linkstats(conns: list[dict[str, Any]], window_ns: int, end: int) -> list[dict[str, Any]]:
    """Per connection and window: the transfers that completed in it and those still open."""
    by_conn = defaultdict(list)
    for c in conns:
        by_conn[(c["src"], c["dst"], c.get("pg"), tuple(c.get("path") or ()))].append(c)
    out = []
    for (s, d, pg, path), cs in by_conn.items():
        first = min(c["t_start_ns"] for c in cs) // window_ns
        last = max(c.get("t_end_ns", end) for c in cs) // window_ns
        for w in range(first, last + 1):
            lo, hi = w * window_ns, (w + 1) * window_ns
            done = [c for c in cs if "t_end_ns" in c and lo <= c["t_end_ns"] < hi]
            open_ = [c for c in cs if c["t_start_ns"] < hi and c.get("t_end_ns", end + 1) >= hi]
            if not done and not open_:
                continue
            rec: dict[str, Any] = {"type": "linkstat", "src": s, "dst": d, "t_ns": hi,
                                   "window_ns": window_ns}
            if pg is not None:
                rec["pg"] = pg
            if path:
                rec["path"] = list(path)
            if done:
                durs = [c["t_end_ns"] - c["t_start_ns"] for c in done]
                rec.update(transfers=len(done), bytes=sum(c["bytes"] for c in done),
                           busy_ns=sum(durs), max_ns=max(durs))
            if open_:
                rec.update(open=len(open_), open_since_ns=min(c["t_start_ns"] for c in open_))
            out.append(rec)
    return out


def ports(ranks: list[dict[str, Any]], ops: list[dict[str, Any]],
          every_ns: int) -> list[dict[str, Any]]:
    """Every NIC up, its counters climbing with the bytes of the calls, sampled every
    ``every_ns`` over the job."""
    t0 = min(r["t_enter_ns"] for r in ops)
    t1 = max(r.get("t_end_ns", r["t_enter_ns"]) for r in ops)
    nics = sorted({(r["host"], r["nic"]) for r in ranks if r.get("nic")})
    out = []
    for k, t in enumerate(range(t0, t1 + 1, every_ns)):
        for host, nic in nics:
            out.append({"type": "port", "host": host, "nic": nic, "t_ns": t, "state": "up",
                        "symbol_errors": 0, "rx_bytes": k << 20, "tx_bytes": k << 20})
    return out
