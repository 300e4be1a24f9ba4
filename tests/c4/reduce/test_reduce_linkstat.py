"""linkstat records, by hand on small cases and against a brute-force recomputation."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from c4.reduce import EdgeReducer
from tests.support.reduce_ops import linkstats, transfers

W = 100


def rec(src, dst, t_ns, *, pg=-1, window_ns=W, transfers=0, nbytes=0, busy_ns=0, max_ns=0,
        open_=0, open_since_ns=-1, retrans=-1, path=-1):
    return {"src": src, "dst": dst, "pg": pg, "t_ns": t_ns, "window_ns": window_ns,
            "transfers": transfers, "bytes": nbytes, "busy_ns": busy_ns, "max_ns": max_ns,
            "open": open_, "open_since_ns": open_since_ns, "retrans": retrans, "path": path}


def test_completed_transfers_and_one_open_across_windows():
    red = EdgeReducer(window_ns=W)
    red.add_transfers(transfers([
        {"src": 0, "dst": 1, "bytes": 10, "t_start_ns": 10, "t_end_ns": 40, "path": 7,
         "retrans": 2},
        {"src": 0, "dst": 1, "bytes": 30, "t_start_ns": 50, "t_end_ns": 90, "path": 7,
         "retrans": 1},
        # starts in window 0, ends in window 2: open at the ends of windows 0 and 1
        {"src": 0, "dst": 1, "bytes": 99, "t_start_ns": 80, "t_end_ns": 250, "path": 8},
    ]))
    got = linkstats(red.flush(400))
    assert got == [
        rec(0, 1, 100, transfers=2, nbytes=40, busy_ns=70, max_ns=40, open_=1,
            open_since_ns=80, retrans=3, path=8),
        rec(0, 1, 200, open_=1, open_since_ns=80, path=8),
        rec(0, 1, 300, transfers=1, nbytes=99, busy_ns=170, max_ns=170, path=8),
    ]   # window 3: nothing completed, nothing open: no record


def test_a_stuck_transfer_is_open_in_every_window_until_the_end():
    red = EdgeReducer(window_ns=W)
    red.add_transfers(transfers([{"src": 3, "dst": 4, "bytes": 5, "t_start_ns": 120,
                                  "t_end_ns": None, "path": 1}], []))
    got = linkstats(red.advance(450)) + linkstats(red.flush(730))
    assert [(r["t_ns"], r["window_ns"], r["open"], r["open_since_ns"], r["transfers"])
            for r in got] == [(t, W, 1, 120, 0) for t in (200, 300, 400, 500, 600, 700)] \
        + [(730, 30, 1, 120, 0)]


def test_an_open_row_replaced_by_its_completed_row():
    red = EdgeReducer(window_ns=W)
    red.add_transfers(transfers([{"src": 0, "dst": 1, "bytes": 8, "t_start_ns": 20,
                                  "t_end_ns": None}]))
    assert [r["open"] for r in linkstats(red.advance(200))] == [1, 1]
    red.add_transfers(transfers([{"src": 0, "dst": 1, "bytes": 8, "t_start_ns": 20,
                                  "t_end_ns": 230}]))
    assert linkstats(red.flush(600)) == [
        rec(0, 1, 300, transfers=1, nbytes=8, busy_ns=210, max_ns=210)]
    assert red.stats.late_transfers == 0


def test_connections_are_src_dst_and_communicator():
    strings = ["dp.0", "dp.1"]
    red = EdgeReducer(window_ns=W)
    red.add_transfers(transfers([
        {"src": 0, "dst": 1, "pg": "dp.0", "bytes": 1, "t_start_ns": 0, "t_end_ns": 10},
        {"src": 0, "dst": 1, "pg": "dp.1", "bytes": 2, "t_start_ns": 0, "t_end_ns": 10},
        {"src": 1, "dst": 0, "pg": "dp.0", "bytes": 4, "t_start_ns": 0, "t_end_ns": 10},
    ], strings))
    got = {(r["src"], r["dst"], r["pg"]): r["bytes"] for r in linkstats(red.flush(100))}
    assert got == {(0, 1, "dp.0"): 1, (0, 1, "dp.1"): 2, (1, 0, "dp.0"): 4}


def test_a_completion_after_its_window_closed_is_counted_late_in_the_next():
    red = EdgeReducer(window_ns=W)
    red.advance(300)
    red.add_transfers(transfers([{"src": 0, "dst": 1, "bytes": 8, "t_start_ns": 20,
                                  "t_end_ns": 150}]))
    got = linkstats(red.flush(400))
    assert [(r["t_ns"], r["transfers"], r["open"]) for r in got] == [(400, 1, 0)]
    assert red.stats.late_transfers == 1


# ----- property: streaming output equals a brute-force recomputation ------------------------
def _random_transfers(rng: np.random.Generator) -> list[dict]:
    rows = []
    for src, dst in ((0, 1), (1, 0), (1, 2)):
        for _ in range(int(rng.integers(0, 15))):
            start = int(rng.integers(0, 1500))
            dur = int(rng.choice([rng.integers(0, 40), rng.integers(50, 500)]))
            end = None if rng.random() < 0.1 else start + dur
            rows.append({"src": src, "dst": dst, "bytes": int(rng.integers(1, 1000)),
                         "t_start_ns": start, "t_end_ns": end,
                         "path": int(rng.integers(0, 3)),
                         "retrans": int(rng.integers(0, 3)) if rng.random() < 0.5 else None})
    return rows


def _brute(rows: list[dict], end_ns: int) -> list[dict]:
    by = defaultdict(list)
    for r in rows:
        by[r["src"], r["dst"]].append(r)
    out = []
    for (src, dst), rs in by.items():
        for w in range(0, end_ns // W + 1):
            lo, e = w * W, min((w + 1) * W, end_ns)
            if lo >= end_ns:
                break
            done = [r for r in rs if r["t_end_ns"] is not None and lo <= r["t_end_ns"] < e]
            opened = [r for r in rs if r["t_start_ns"] < e
                      and (r["t_end_ns"] is None or r["t_end_ns"] >= e)]
            if not done and not opened:
                continue
            counted = [r["retrans"] for r in done if r["retrans"] is not None]
            latest = max(done + opened, key=lambda r: r["t_start_ns"])
            durs = [r["t_end_ns"] - r["t_start_ns"] for r in done]
            out.append(rec(src, dst, e, window_ns=e - lo, transfers=len(done),
                           nbytes=sum(r["bytes"] for r in done), busy_ns=sum(durs),
                           max_ns=max(durs, default=0), open_=len(opened),
                           open_since_ns=min((r["t_start_ns"] for r in opened), default=-1),
                           retrans=sum(counted) if counted else -1,
                           path=latest["path"]))
    return out


def _key(r: dict) -> tuple:
    return (r["t_ns"], r["src"], r["dst"])


@pytest.mark.parametrize("seed", range(25))
def test_streamed_linkstat_equals_brute_force(seed):
    """Fed as a collector reports: an open row once a transfer started, its completed row once
    it ended, the watermark at the step's time."""
    rng = np.random.default_rng(seed)
    rows = _random_transfers(rng)
    # two transfers of one connection starting at the same time with different paths would
    # tie on "latest started": keep starts distinct per connection
    seen, uniq = set(), []
    for r in rows:
        if (r["src"], r["dst"], r["t_start_ns"]) not in seen:
            seen.add((r["src"], r["dst"], r["t_start_ns"]))
            uniq.append(r)
    rows = uniq
    end_ns = 2100 + int(rng.integers(0, 150))
    red = EdgeReducer(window_ns=W)
    got: list[dict] = []
    t = 0
    while t < end_ns:
        nxt = min(end_ns, t + int(rng.integers(1, 3 * W)))
        started = [dict(r, t_end_ns=None) for r in rows if t <= r["t_start_ns"] < nxt]
        ended = [r for r in rows if r["t_end_ns"] is not None and t <= r["t_end_ns"] < nxt]
        for batch in (started, ended):
            if batch:
                red.add_transfers(transfers(batch))
        got += linkstats(red.advance(nxt))
        t = nxt
    got += linkstats(red.flush(end_ns))
    assert got or not rows
    assert sorted(got, key=_key) == sorted(_brute(rows, end_ns), key=_key)
    assert red.stats.late_transfers == 0
