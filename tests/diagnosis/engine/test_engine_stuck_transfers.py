"""Localizing transfers that stopped moving (comm_hang with connection records), on hand-built
traces over four hosts on one switch: which NIC, and what stays in view."""

from __future__ import annotations

import pytest

from c4.topology.builders import single_switch
from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace

MS = 1_000_000
T0 = 1_000 * MS
HANG = 20          # the iteration in which the transfer sticks
RING = [(0, 1), (1, 2), (2, 3), (3, 0)]


def nic(r: int) -> str:
    return f"node00{r}/nic0"


def write_job(w: TraceWriter, p2p: list[tuple[str, int, int]], dead: int | None,
              recv_early: bool = False, conns: bool = True) -> None:
    """Per iteration: the send/recv pairs ``p2p`` (pg, src, dst) one after the other, then an
    all-reduce ring over ranks 0-3. In iteration HANG, NIC ``dead`` dies after the pairs before
    the last one: the next transfer across it never finishes and the job waits 60 s.
    ``recv_early``: the receiver of each pair enters 3 ms before the transfer can start.
    ``conns``: write connection records (else op records only)."""
    for r in range(4):
        w.rank(r, f"node00{r}", gpu=f"node00{r}/gpu0", nic=nic(r))
    w.group("dp", [0, 1, 2, 3])
    for pg, s, d in p2p:
        w.group(pg, [s, d])
    for it in range(HANG + 1):
        t = T0 + it * 100 * MS
        for i, (pg, s, d) in enumerate(p2p):
            stuck = it == HANG and dead in (s, d) and i == len(p2p) - 1
            enter_recv = t - 3 * MS if recv_early else t
            end = None if stuck else t + 2 * MS
            w.op(s, pg, it, "send", 1 << 20, t, end, peer=d)
            w.op(d, pg, it, "recv", 1 << 20, enter_recv, end, peer=s)
            if conns:
                w.conn(s, d, 1 << 20, t, end, pg=pg, seq=it, path=[nic(s), "switch0", nic(d)])
            if stuck:
                w.end(t + 60_000 * MS)
                return
            t += 3 * MS
        t += 5 * MS
        stuck = it == HANG and dead is not None
        for r in range(4):
            w.op(r, "dp", it, "all_reduce", 4 << 20, t + r * 10_000, None if stuck else t + 10 * MS)
        for s, d in RING:
            # a ring with a dead member: the connections into and out of it stay open, the
            # others forward what reaches them (a chunk) and finish
            hit = stuck and dead in (s, d)
            if conns:
                w.conn(s, d, (1 if stuck else 3) << 20, t + 50_000,
                       None if hit else t + (4 if stuck else 9) * MS,
                       pg="dp", seq=it, path=[nic(s), "switch0", nic(d)])
        if stuck:
            w.end(t + 60_000 * MS)
            return


def diagnose(tmp_path, **kw):
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        write_job(w, **kw)
    reports, _ = feed_trace(Engine(single_switch(4)), path)
    return reports


def ids(report, n=None):
    return [(s.type, s.id) for s in report.suspects[:n]]


def score(report, typ, ident):
    return next(s.score for s in report.suspects if (s.type, s.id) == (typ, ident))


def test_nic_common_to_every_stuck_connection_comes_first(tmp_path):
    reports = diagnose(tmp_path, p2p=[], dead=2)
    assert [r.kind for r in reports] == ["comm_hang"]
    r = reports[0]
    # 1>2 and 2>3 stuck, 0>1 and 3>0 finished after they began: NIC 2 and its cable, equally
    assert ids(r, 2) == [("nic", nic(2)), ("link", f"{nic(2)}~switch0")]
    assert r.suspects[0].score == r.suspects[1].score
    # the far ends carried the ring's other transfers, which finished after the stuck ones
    # began: cleared; the stuck connections' GPUs follow
    rest = ids(r)
    assert not {("nic", nic(q)) for q in (0, 1, 3)} & set(rest)
    assert rest[2:] == [("gpu", "node001/gpu0"), ("gpu", "node002/gpu0")]
    assert r.suspects[2].score < r.suspects[0].score


def test_one_stuck_transfer_names_both_ends_the_silent_one_first(tmp_path):
    # NIC 0 dies; the transfer 0>1 sticks; NIC 1 carried 2>1 just before it, NIC 0 nothing
    # since the last all-reduce: both ends stay in the top 3, NIC 0 (silent longer) first
    reports = diagnose(tmp_path, p2p=[("qq", 2, 1), ("pp", 0, 1)], dead=0)
    assert [r.kind for r in reports] == ["comm_hang"]
    r = reports[0]
    assert ids(r, 2) == [("nic", nic(0)), ("link", f"{nic(0)}~switch0")]
    assert ("nic", nic(1)) in ids(r, 3)
    assert score(r, "nic", nic(1)) < r.suspects[0].score
    assert score(r, "link", f"{nic(0)}~switch0") == r.suspects[0].score


def test_traffic_before_the_stuck_transfer_began_clears_nothing(tmp_path):
    # the receiver enters 3 ms early; meanwhile the sender's NIC finishes 3>0 and then dies:
    # that transfer ended before the stuck one began, so it does not clear NIC 0
    reports = diagnose(tmp_path, p2p=[("rr", 3, 0), ("pp", 0, 1)], dead=0, recv_early=True)
    assert [r.kind for r in reports] == ["comm_hang"]
    top3 = ids(reports[0], 3)
    assert ("nic", nic(0)) in top3 and ("nic", nic(1)) in top3


def test_without_conn_records_calls_that_ended_before_the_stuck_one_began_clear_nothing(
        tmp_path):
    # op records only: 3>0 ends after the receiver entered the stuck 0>1 but before the sender
    # did (the transfer could not begin yet): NIC 0 stays among the equal top suspects
    reports = diagnose(tmp_path, p2p=[("rr", 3, 0), ("pp", 0, 1)], dead=0, recv_early=True,
                       conns=False)
    assert [r.kind for r in reports] == ["comm_hang"]
    r = reports[0]
    top = [(s.type, s.id) for s in r.suspects if s.score == r.suspects[0].score]
    assert ("nic", nic(0)) in top and ("nic", nic(1)) in top
    # the sentence a person acts on does not single out one of them
    assert f"check {top[0][0]} {top[0][1]} or any of the {len(top) - 1} others" in r.summary


def test_equally_silent_ends_tie(tmp_path):
    # the stuck transfer is each NIC's first since the last all-reduce, which crossed both at
    # the same time: nothing tells them apart, and the scores say so
    reports = diagnose(tmp_path, p2p=[("pp", 0, 1)], dead=1)
    r = reports[0]
    assert {s.score for s in r.suspects[:4]} == {r.suspects[0].score}
    assert "or any of the 4 others that explain it as well" in r.summary
    assert set(ids(r, 4)) == {("nic", nic(0)), ("nic", nic(1)), ("link", f"{nic(0)}~switch0"),
                              ("link", f"{nic(1)}~switch0")}


@pytest.mark.parametrize("call", [True, False])
def test_transfers_of_the_stuck_call_clear_whatever_the_clocks(tmp_path, call):
    # rank 0's transfer to 1 in the all-reduce sticks (its own transport, not the network).
    # Rank 1's transfer to 2 in the same call sends its one chunk and ends, short of its usual
    # bytes: it ran dry because the stuck one stopped. By host 1's clock, 0.3 ms behind host
    # 0's, it ended before the stuck one began. NIC 1 is still cleared, and nothing on the
    # path is left to blame but the sender. Without ``call`` (conn records without pg/seq) the
    # transfers of the same call are those that began with the stuck one
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        for r in range(4):
            w.rank(r, f"node00{r}", gpu=f"node00{r}/gpu0", nic=nic(r))
        w.group("dp", [0, 1, 2, 3])
        for it in range(HANG + 1):
            t = T0 + it * 100 * MS
            stuck = it == HANG
            for r in range(4):
                w.op(r, "dp", it, "all_reduce", 4 << 20, t, None if stuck else t + 10 * MS)
            for s, d in RING:
                start, end, nbytes = t, t + 9 * MS, 3 << 20
                if stuck and s == 0:
                    start, end = t + 300_000, None
                elif stuck and s == 1:
                    end, nbytes = t + 100_000, 1 << 20
                w.conn(s, d, nbytes, start, end, pg="dp" if call else None,
                       seq=it if call else None, path=[nic(s), "switch0", nic(d)])
        w.end(T0 + HANG * 100 * MS + 60_000 * MS)
    reports, _ = feed_trace(Engine(single_switch(4)), path)
    assert [r.kind for r in reports] == ["comm_hang"]
    assert ids(reports[0], 1) == [("gpu", "node000/gpu0")]


def diagnose_p2p(tmp_path, transfers):
    """Point-to-point transfers only, one of each pair per iteration: ``transfers(t, stuck)``
    gives (pg, src, dst, start, end) for the iteration starting at ``t`` (end None: never
    ends); the job waits 60 s after iteration HANG."""
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        for r in range(4):
            w.rank(r, f"node00{r}", gpu=f"node00{r}/gpu0", nic=nic(r))
        for pg, s, d, _, _ in transfers(T0, False):
            w.group(pg, [s, d])
        for it in range(HANG + 1):
            for pg, s, d, start, end in transfers(T0 + it * 100 * MS, it == HANG):
                w.op(s, pg, it, "send", 1 << 20, start, end, peer=d)
                w.op(d, pg, it, "recv", 1 << 20, start, end, peer=s)
                w.conn(s, d, 1 << 20, start, end, pg=pg, seq=it,
                       path=[nic(s), "switch0", nic(d)])
        w.end(T0 + HANG * 100 * MS + 60_000 * MS)
    reports, _ = feed_trace(Engine(single_switch(4)), path)
    return reports


def test_a_nic_dying_half_way_through_the_stuck_transfer_stays_a_suspect(tmp_path):
    # 0>1 usually takes 2 ms. In iteration HANG, 2>0 ends over NIC 0 0.5 ms after 0>1 began
    # and 3>1 over NIC 1 0.3 ms after; then NIC 0 dies and 0>1 never ends. Neither later
    # transfer proves its NIC alive after 0>1 should have ended: both NICs stay the top
    # suspects, NIC 0 (silent 1.5 ms before then) and NIC 1 (1.7 ms) almost even, and the sender
    # (weighed as a component dying within half of 0>1's usual run) comes after them
    reports = diagnose_p2p(tmp_path, lambda t, stuck: (
        ("qq", 2, 0, t - MS, t + MS // 2),
        ("rr", 3, 1, t - MS, t + 3 * MS // 10),
        ("pp", 0, 1, t, None if stuck else t + 2 * MS)))
    assert [r.kind for r in reports] == ["comm_hang"]
    r = reports[0]
    assert set(ids(r, 4)) == {("nic", nic(0)), ("link", f"{nic(0)}~switch0"),
                              ("nic", nic(1)), ("link", f"{nic(1)}~switch0")}
    assert 0.8 < score(r, "nic", nic(0)) / score(r, "nic", nic(1)) < 0.95
    assert score(r, "gpu", "node000/gpu0") < score(r, "nic", nic(0))


def test_a_busy_switch_comes_before_stalled_senders_on_several_hosts(tmp_path):
    # each iteration: a 50 ms transfer 0>2, then 3>1 and 1>3 of 2 ms. In iteration HANG the
    # switch dies 1 ms after 3>1 ends: 0>2 and 1>3 never end. The switch was busy until then
    # (silent 3 ms before 1>3 was due), while 0>2's sender could have stalled anywhere in its
    # 50 ms; but senders on two hosts would have had to stall at once, against one switch
    reports = diagnose_p2p(tmp_path, lambda t, stuck: (
        ("big", 0, 2, t, None if stuck else t + 50 * MS),
        ("qq", 3, 1, t + 37 * MS, t + 39 * MS),
        ("rr", 1, 3, t + 40 * MS, None if stuck else t + 42 * MS)))
    assert [r.kind for r in reports] == ["comm_hang"]
    r = reports[0]
    assert ids(r, 1) == [("switch", "switch0")]
    assert score(r, "gpu", "node000/gpu0") < r.suspects[0].score
