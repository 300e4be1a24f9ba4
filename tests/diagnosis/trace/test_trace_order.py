"""Traces out of time order (the format allows lines in any order): per-rank logs one after the
other, or shuffled lines, are sorted on disk before the engine sees them, and give the reports
the same job gives in time order."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest

from c4.proto.codec import Columns
from diagnosis.engine import Engine
from diagnosis.trace.feed import feed_trace
from diagnosis.trace.order import OrderWatch, op_visible_ns, time_ordered
from diagnosis.trace.reader import End, GroupInfo, RankInfo, read_trace
from diagnosis.trace.synth import SynthJob

S = 1_000_000_000


def test_order_watch_tolerates_small_lags_and_catches_a_jump_back():
    w = OrderWatch(tolerance_ns=5 * S)
    assert w.check(np.array([10, 12, 11, 20], dtype=np.int64) * S)
    assert w.check(np.array([16, 30], dtype=np.int64) * S)      # 4 s behind the latest: fine
    assert not w.check(np.array([31, 24], dtype=np.int64) * S)  # 7 s behind
    assert w.behind_ns == 7 * S


def _reorder(path, out, key) -> None:
    """Rewrite a trace with its op and conn lines in another order (header first, end last)."""
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    head = [x for x in lines if x["type"] in ("meta", "rank", "group")]
    rows = [x for x in lines if x["type"] in ("op", "conn")]
    tail = [x for x in lines if x["type"] == "end"]
    rows = key(rows)
    out.write_text("".join(json.dumps(x) + "\n" for x in head + rows + tail))


def _rank_major(rows):
    return sorted(rows, key=lambda x: (x.get("rank", x.get("src")), x.get("t_enter_ns",
                                                                            x.get("t_start_ns"))))


def _shuffled(rows):
    random.Random(7).shuffle(rows)
    return rows


def _rows(items):
    """Every telemetry row as a hashable tuple of its values, names resolved."""
    out = Counter()
    for it in items:
        if isinstance(it, Columns):
            names = np.asarray(it.strings, dtype=object)
            c = it.columns
            for i in range(len(it)):
                out[("op", int(c["rank"][i]), names[c["pg"][i]], int(c["seq"][i]),
                     names[c["op"][i]], int(c["t_enter_ns"][i]), int(c["t_end_ns"][i]))] += 1
        elif hasattr(it, "src"):
            for i in range(len(it)):
                pg = it.strings[it.pg[i]] if it.pg[i] >= 0 else None
                path = it.paths[i] if it.paths is not None else None
                out[("conn", int(it.src[i]), int(it.dst[i]), pg, int(it.t_start_ns[i]),
                     int(it.t_end_ns[i]), path)] += 1
    return out


def test_time_ordered_keeps_every_row_and_sorts_them_across_spilled_runs(tmp_path):
    job = SynthJob(hosts=4, gpus_per_host=2, iterations=12)
    path = tmp_path / "t.jsonl"
    job.write(path, job.topology())
    shuffled = tmp_path / "s.jsonl"
    _reorder(path, shuffled, _shuffled)
    items = list(time_ordered(read_trace(shuffled, block_bytes=4096), run_rows=300, step=50,
                              folder=tmp_path))
    kinds = [type(i).__name__ for i in items]
    first_row = min(kinds.index(k) for k in ("Columns", "ConnRecords"))
    assert set(kinds[:first_row]) <= {"Meta", "RankInfo", "GroupInfo"}
    assert isinstance(items[-1], End)
    assert not any(isinstance(i, (RankInfo, GroupInfo)) for i in items[first_row:])
    assert _rows(items) == _rows(read_trace(path))
    vis = np.concatenate([op_visible_ns(i) for i in items if isinstance(i, Columns)])
    assert (np.diff(vis) >= 0).all()
    assert list(tmp_path.glob("c4-sort-*")) == []       # spilled runs are removed


@pytest.mark.parametrize("order", [_rank_major, _shuffled], ids=["rank-major", "shuffled"])
def test_out_of_order_trace_gives_the_reports_of_the_ordered_one(tmp_path, order):
    job = SynthJob(hosts=4, gpus_per_host=2, iterations=30, slow_ranks={5: 1.5})
    topo = job.topology()
    path = tmp_path / "t.jsonl"
    job.write(path, topo)
    ordered, stats = feed_trace(Engine(topo), path)
    assert not stats.sorted
    assert [(r.kind, r.suspects[0].rank) for r in ordered] == [("noncomm_slow", 5)]
    other = tmp_path / "o.jsonl"
    _reorder(path, other, order)
    reports, stats = feed_trace(Engine(topo), other, block_bytes=8192)
    assert stats.sorted and stats.ops > 500
    assert [(r.kind, r.suspects[0].rank) for r in reports] == [("noncomm_slow", 5)]


def test_order_watch_catches_a_collective_far_behind_its_communicator():
    def batch(rows):     # (pg, seq, peer) at one time
        pgs = sorted({r[0] for r in rows})
        cols = {"pg": np.array([pgs.index(r[0]) for r in rows], dtype=np.uint32),
                "seq": np.array([r[1] for r in rows], dtype=np.int64),
                "peer": np.array([r[2] for r in rows], dtype=np.int32),
                "t_enter_ns": np.full(len(rows), S, dtype=np.int64),
                "t_end_ns": np.full(len(rows), S, dtype=np.int64)}
        return Columns(cols, pgs)

    w = OrderWatch(tolerance_calls=32)
    assert w.check_ops(batch([("a", s, -1) for s in range(100)] + [("b", 3, -1)]))
    assert w.check_ops(batch([("a", 70, -1), ("b", 0, -1), ("a", 100, 1)]))  # within 32
    assert w.check_ops(batch([("p", 0, 4)] * 3))        # point-to-point rows are not judged
    assert not w.check_ops(batch([("b", 4, -1), ("a", 60, -1)]))             # 39 behind
    assert w.behind_calls == 39


# ----- version 2 -------------------------------------------------------------------------------
def _v2_rows(items):
    """Every row of the version 2 kinds (and conn retrans) as hashable tuples, names resolved."""
    from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords

    def name(strings, i):
        return strings[i] if i >= 0 else None

    out = Counter()
    for it in items:
        for i in range(len(it) if hasattr(it, "__len__") else 0):
            if isinstance(it, ProgressRecords):
                out[("progress", int(it.rank[i]), name(it.strings, it.pg[i]),
                     name(it.strings, it.op[i]), int(it.peer[i]), int(it.t_ns[i]),
                     int(it.entered[i]), int(it.completed[i]))] += 1
            elif isinstance(it, LinkStatRecords):
                out[("linkstat", name(it.strings, it.pg[i]),
                     it.paths[i] if it.paths is not None else None,
                     *(int(getattr(it, k)[i]) for k in (
                         "src", "dst", "t_ns", "window_ns", "transfers", "bytes", "busy_ns",
                         "max_ns", "open", "open_since_ns", "retrans")))] += 1
            elif isinstance(it, PortRecords):
                out[("port", name(it.strings, it.host[i]), name(it.strings, it.nic[i]),
                     int(it.t_ns[i]), int(it.up[i]),
                     tuple(sorted((k, int(v[i])) for k, v in it.counters.items()
                                  if v[i] >= 0)))] += 1
            elif hasattr(it, "retrans") and it.retrans is not None:
                out[("retrans", int(it.src[i]), int(it.t_start_ns[i]), int(it.retrans[i]))] += 1
    return out


def _v2_job(tmp_path):
    import random

    from tests.support.v2trace import to_v2

    job = SynthJob(hosts=4, gpus_per_host=2, iterations=30, slow_ranks={5: 1.5})
    topo = job.topology()
    job.write(tmp_path / "v1.jsonl", topo)
    to_v2(tmp_path / "v1.jsonl", tmp_path / "v2.jsonl")
    # some conns with retrans too, and port counters on some rows only
    lines = [json.loads(ln) for ln in (tmp_path / "v2.jsonl").read_text().splitlines()]
    rng = random.Random(3)
    for x in lines:
        if x["type"] == "port" and rng.random() < 0.3:
            x["link_downed"] = rng.randrange(3)
        if x["type"] == "linkstat" and rng.random() < 0.3:
            x["retrans"] = rng.randrange(5)
    lines.insert(-1, {"type": "conn", "src": 0, "dst": 1, "bytes": 8, "t_start_ns": job.t0_ns,
                      "t_end_ns": job.t0_ns + 10, "retrans": 2})
    (tmp_path / "v2.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return topo


def test_time_ordered_sorts_every_v2_kind_and_keeps_every_field(tmp_path):
    from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords

    _v2_job(tmp_path)
    shuffled = tmp_path / "s.jsonl"
    _reorder_all(tmp_path / "v2.jsonl", shuffled)
    items = list(time_ordered(read_trace(shuffled, block_bytes=4096), run_rows=200, step=40,
                              folder=tmp_path))
    want = _v2_rows(read_trace(tmp_path / "v2.jsonl"))
    assert _v2_rows(items) == want
    assert {k[0] for k in want} == {"progress", "linkstat", "port", "retrans"}
    for cls in (ProgressRecords, LinkStatRecords, PortRecords):
        t = np.concatenate([i.t_ns for i in items if isinstance(i, cls)])
        assert len(t) > 50 and (np.diff(t) >= 0).all(), cls.__name__
    assert list(tmp_path.glob("c4-sort-*")) == []


def _reorder_all(path, out) -> None:
    """Every telemetry line of a trace shuffled (header first, end last)."""
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    head = [x for x in lines if x["type"] in ("meta", "rank", "group")]
    tail = [x for x in lines if x["type"] == "end"]
    rows = _shuffled([x for x in lines if x["type"] not in ("meta", "rank", "group", "end")])
    out.write_text("".join(json.dumps(x) + "\n" for x in head + rows + tail))


def test_shuffled_v2_trace_is_sorted_and_gives_the_reports_of_the_ordered_one(tmp_path):
    topo = _v2_job(tmp_path)
    ordered, stats = feed_trace(Engine(topo), tmp_path / "v2.jsonl")
    assert not stats.sorted
    assert [(r.kind, r.suspects[0].rank) for r in ordered] == [("noncomm_slow", 5)]
    _reorder_all(tmp_path / "v2.jsonl", tmp_path / "s.jsonl")
    reports, shuffled = feed_trace(Engine(topo), tmp_path / "s.jsonl", block_bytes=8192)
    assert shuffled.sorted
    assert (shuffled.progress, shuffled.linkstats, shuffled.ports, shuffled.ops) == (
        stats.progress, stats.linkstats, stats.ports, stats.ops)
    assert [(r.kind, r.suspects[0].rank) for r in reports] == [("noncomm_slow", 5)]


def test_a_v2_kind_far_out_of_order_is_caught_alone(tmp_path):
    """Ops in order, progress rows of one rank after another's: the progress watch alone
    finds it."""
    from tests.support.v2trace import to_v2

    job = SynthJob(hosts=2, gpus_per_host=2, iterations=30)
    job.write(tmp_path / "v1.jsonl", job.topology())
    to_v2(tmp_path / "v1.jsonl", tmp_path / "v2.jsonl")
    lines = [json.loads(ln) for ln in (tmp_path / "v2.jsonl").read_text().splitlines()]
    progress = sorted((x for x in lines if x["type"] == "progress"),
                      key=lambda x: (x["rank"], x["t_ns"]))
    rest = [x for x in lines if x["type"] not in ("progress", "end")]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(x) + "\n"
                                              for x in rest + progress + lines[-1:]))
    _, stats = feed_trace(Engine(job.topology()), tmp_path / "p.jsonl", block_bytes=8192)
    assert stats.sorted and stats.progress == len(progress)
