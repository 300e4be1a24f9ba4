"""Reduction at the edge, by hand: what a sidecar ships per job before and after the daemon's
schedule sets K > 1 (sampled calls, errors and last words, progress and linkstat windows), and
how a late step and a window change are handled."""

from __future__ import annotations

import numpy as np

from c4.proto import c4_pb2
from c4.proto.codec import (
    CONN_COLUMNS,
    Columns,
    decode_linkstats,
    decode_ops,
    decode_progress,
)
from c4.proto.sampling import is_sampled
from collectors.sidecar.edge import Edge, EdgeConfig
from collectors.sidecar.spill import FrameRef
from tests.support.reduce_ops import ops

S = 1_000_000_000
T0 = 1_000 * S


class Rig:
    """An Edge with a settable clock; records what it ships and what it hands the batcher."""

    def __init__(self, **config: object) -> None:
        self.now = T0
        self.sent: list[tuple[str, object]] = []
        self.batched: list[Columns] = []
        self.frames: list[FrameRef] = []
        self.edge = Edge("node0", EdgeConfig(ports="off", lag_s=1.0, **config),
                         self._emit, lambda frames, req: None, self._add,
                         clock=lambda: self.now)
        self.edge.job("j", 0)

    def _add(self, cols: Columns, frame: FrameRef, nbytes: int) -> None:
        self.frames.append(frame)
        if len(cols):
            self.batched.append(cols)

    def _emit(self, **body: object) -> None:
        ((kind, msg),) = body.items()
        self.sent.append((kind, msg))

    def calls(self, seqs, *, t: int, ranks=(0, 1), pg: str = "0", status: int = 0,
              open_: bool = False) -> None:
        rows = [{"rank": r, "pg": pg, "seq": q, "op": "all_reduce",
                 "t_enter_ns": t + i * 1000, "t_end_ns": None if open_ else t + i * 1000 + 500,
                 "status": status} for i, q in enumerate(seqs) for r in ranks]
        cols = ops(rows, [pg, "all_reduce"])
        cols.columns["dtype"] = np.zeros(len(cols), np.uint32)
        cols.columns["t_start_ns"] = np.full(len(cols), -1, np.int64)
        self.edge.add(cols, FrameRef(0, 0, len(cols), ("j", 0)), 100)
        self.edge.drain()

    def schedule(self, version: int, steps: dict, window_ns: int = 0, from_ns: int = 0) -> None:
        msg = c4_pb2.SampleSchedule(job="j", version=version, window_ns=window_ns,
                                    window_from_ns=from_ns,
                                    steps=[c4_pb2.SampleStep(pg=pg, from_seq=s, sample=k)
                                           for pg, (s, k) in steps.items()])
        self.edge.on_control(c4_pb2.Control(schedule=msg))
        self.edge.tick()

    def shipped_seqs(self) -> list[int]:
        mended = [decode_ops(m) for k, m in self.sent if k == "ops"]
        return sorted(q for c in [*self.batched, *mended] for q in c["seq"].tolist())

    def of(self, kind: str) -> list:
        return [m for k, m in self.sent if k == kind]


def test_without_a_schedule_everything_goes_as_before():
    rig = Rig()
    rig.calls(range(100), t=T0)
    assert rig.shipped_seqs() == sorted(list(range(100)) * 2)
    rig.edge.add_conns("j", 0, _samples([(0, "a:1", "b:2", T0, 100, 0)]))
    assert len(rig.of("conns")) == 1
    rig.now += 5 * S
    rig.edge.tick()
    assert not rig.of("progress") and not rig.of("linkstats")


def test_sampled_calls_errors_and_last_words():
    rig = Rig()
    rig.schedule(1, {"0": (0, 8)})
    rig.calls(range(0, 400), t=T0)
    kept = {q for q in range(400) if is_sampled("0", q, 8)}
    assert set(rig.shipped_seqs()) == kept and len(rig.shipped_seqs()) == 2 * len(kept)
    rig.batched.clear()
    # an error goes at once, sampled or not; so does an open row (a call pending too long)
    unsampled = [q for q in range(400, 800) if not is_sampled("0", q, 8)]
    rig.calls([unsampled[0]], t=T0 + S, ranks=(1,), status=2)
    rig.calls([unsampled[1]], t=T0 + S, ranks=(0,), open_=True)
    assert rig.shipped_seqs() == sorted(unsampled[:2])
    rig.batched.clear()
    # ... and the completion of a call that went out open
    rig.calls([unsampled[1], unsampled[2]], t=T0 + S, ranks=(0,))
    assert rig.shipped_seqs() == [unsampled[1]]
    assert rig.edge.stats.ops_in == 800 + 4
    # every logged frame reaches the batcher, kept rows or none, so the log can release it
    assert len(rig.frames) == 4


def test_progress_windows_close_behind_the_watermark():
    rig = Rig()
    rig.schedule(1, {"0": (0, 16)})
    rig.calls(range(0, 10), t=T0 + S // 10)              # window 1000 s
    rig.calls(range(10, 20), t=T0 + S + S // 10)         # window 1001 s
    rig.now = T0 + 2 * S + S // 2                         # watermark 1001.5 s: closes 1000
    rig.edge.tick()
    (batch,) = rig.of("progress")
    p = decode_progress(batch)
    assert p["t_ns"].tolist() == [T0 + S, T0 + S]
    assert sorted(p["rank"].tolist()) == [0, 1]
    assert p["entered"].tolist() == [9, 9] and p["completed"].tolist() == [9, 9]
    rig.now = T0 + 3 * S + S // 2
    rig.edge.tick()
    p = decode_progress(rig.of("progress")[-1])
    assert p["entered"].tolist() == [19, 19] and p["t_ns"].tolist() == [T0 + 2 * S] * 2
    rig.now = T0 + 6 * S
    rig.edge.tick()
    assert len(rig.of("progress")) == 2, "a rank that stops making progress stops emitting"


def _samples(rows) -> Columns:
    """(rank, local, remote, t_ns, bytes_acked, retrans[, busy_us])"""
    table: dict[str, int] = {}
    c = {k: [] for k in CONN_COLUMNS}
    for row in rows:
        rank, loc, rem, t, acked, retx, *busy = row
        c["rank"].append(rank)
        c["local"].append(table.setdefault(loc, len(table)))
        c["remote"].append(table.setdefault(rem, len(table)))
        c["t_ns"].append(t)
        c["bytes_acked"].append(acked)
        c["retrans"].append(retx)
        c["busy_us"].append(busy[0] if busy else 0)
        for k in ("bytes_received", "rtt_us", "delivery_rate"):
            c[k].append(0)
    return Columns({k: np.asarray(v, dtype=dt) for (k, dt), v in
                    zip(CONN_COLUMNS.items(), (c[k] for k in CONN_COLUMNS), strict=True)},
                   list(table))


def test_linkstat_from_socket_samples():
    rig = Rig()
    rig.schedule(1, {"0": (0, 16)})
    t = T0 + S // 10
    # rank 0 <-> rank 1 on this node; rank 0 -> a rank on another node; a stuck socket
    first = [(0, "10.0.0.1:1", "10.0.0.1:2", t, 0, 0), (1, "10.0.0.1:2", "10.0.0.1:1", t, 0, 0),
             (0, "10.0.0.1:3", "10.0.0.9:7", t, 0, 0), (1, "10.0.0.1:4", "10.0.0.8:7", t, 0, 0)]
    rig.edge.add_conns("j", 0, _samples(first))
    t2 = t + S // 2
    rig.edge.add_conns("j", 0, _samples([
        (0, "10.0.0.1:1", "10.0.0.1:2", t2, 1000, 0, 20_000),
        (1, "10.0.0.1:2", "10.0.0.1:1", t2, 500, 0, 10_000),
        (0, "10.0.0.1:3", "10.0.0.9:7", t2, 4000, 2, 100_000),
        (1, "10.0.0.1:4", "10.0.0.8:7", t2, 0, 3)]))
    assert not rig.of("conns"), "reduced: no raw samples leave the node"
    rig.now = T0 + 2 * S + S // 2
    rig.edge.tick()
    ls = decode_linkstats(rig.of("linkstats")[0])
    names = ls.strings
    rows = {(names[lo], names[re]): {k: int(ls[k][i]) for k in ls.columns}
            for i, (lo, re) in enumerate(zip(ls["local"].tolist(), ls["remote"].tolist()))}
    intra = rows[("10.0.0.1:1", "10.0.0.1:2")]
    assert (intra["src"], intra["dst"], intra["transfers"], intra["bytes"]) == (0, 1, 1, 1000)
    assert intra["busy_ns"] == 20_000_000 and intra["t_ns"] == T0 + S
    remote = rows[("10.0.0.1:3", "10.0.0.9:7")]
    assert (remote["dst"], remote["bytes"], remote["retrans"]) == (-1, 4000, 2)
    stuck = rows[("10.0.0.1:4", "10.0.0.8:7")]
    assert (stuck["transfers"], stuck["open"], stuck["open_since_ns"]) == (0, 1, t)


def test_a_late_step_is_mended_from_the_ring():
    rig = Rig()
    rig.schedule(1, {"0": (0, 16)})
    rig.calls(range(0, 300), t=T0)
    before = set(rig.shipped_seqs())
    rig.batched.clear()
    # the daemon lowers K to 4 from seq 200, but rows up to 299 have gone by already
    rig.schedule(2, {"0": (200, 4)})
    mended = set(rig.shipped_seqs())
    want = {q for q in range(200, 300) if is_sampled("0", q, 4) and not is_sampled("0", q, 16)}
    assert mended == want and rig.edge.stats.late_steps == 1
    kept = before | mended
    assert all(q in kept for q in range(200, 300) if is_sampled("0", q, 4))
    # an old version is ignored
    rig.schedule(1, {"0": (0, 1)})
    assert rig.edge.job("j", 0).schedule.version == 2


def test_window_change_takes_effect_at_the_announced_instant():
    rig = Rig()
    rig.schedule(1, {"0": (0, 16)})
    rig.schedule(2, {"0": (0, 16)}, window_ns=2 * S, from_ns=T0 + 4 * S)
    for k in range(8):
        rig.calls(range(10 * k, 10 * k + 10), t=T0 + k * S + S // 10)
        rig.now = T0 + (k + 1) * S + S // 5
        rig.edge.tick()
    rig.now = T0 + 12 * S
    rig.edge.tick()
    ends = sorted({t for b in rig.of("progress") for t in decode_progress(b)["t_ns"].tolist()})
    assert ends == [T0 + k * S for k in (1, 2, 3, 4)] + [T0 + 6 * S, T0 + 8 * S]


def test_detail_request_answered_from_the_ring():
    rig = Rig()
    rig.calls(range(0, 50), t=T0)
    rig.edge.on_control(c4_pb2.Control(detail=c4_pb2.DetailRequest(
        job="j", attempt=0, fault_id="f1", request=7, from_ns=T0, to_ns=T0 + S)))
    rig.edge.tick()
    (ans,) = rig.of("detail")
    assert (ans.fault_id, ans.request, ans.host, ans.status) == \
        ("f1", 7, "node0", c4_pb2.DetailBatch.COMPLETE)
    assert len(decode_ops(ans.ops)) == 100
