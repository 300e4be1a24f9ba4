"""Send/recv op records without ``peer`` (an optional field of the trace format).

In a two-rank communicator the peer is the other rank, so nothing is lost. In a larger one
``seq`` counts per pair and the calls of different pairs cannot be told apart: they are not
matched, but a rank inside one is still busy (not computing) and waiting (not absent)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace

MS = 1_000_000
STAGES = 4


def write_pipeline(path, *, pairs: bool, peer: bool, slow: int | None = None,
                   hang: int | None = None, steps: int = 50, seed: int = 0) -> None:
    """Stages 0 > 1 > 2 > 3 pass activations by send/recv (posted as soon as the receiver is
    free, so downstream stages wait inside their recv), then all_reduce on ``world``. The p2p
    calls run on one four-rank communicator ``pp``, or with ``pairs`` on a two-rank one per
    pair. From step 20 rank ``slow`` computes 1.4 times longer; at step 30 rank ``hang``
    stops (its last rows are step 29's)."""
    rng = np.random.default_rng(seed)
    free = np.zeros(STAGES)

    def comp(s: int, step: int) -> float:
        f = 1.4 if s == slow and step >= 20 else 1.0
        return 20 * MS * f * float(np.exp(rng.normal(0, 0.03)))

    with TraceWriter(path) as w:
        w.group("world", list(range(STAGES)))
        if pairs:
            for s in range(STAGES - 1):
                w.group(f"pp{s}{s + 1}", [s, s + 1])
        else:
            w.group("pp", list(range(STAGES)))
        for step in range(steps):
            stopped = hang is not None and step >= hang
            if stopped and step > hang:
                break
            ready = free[0] + comp(0, step)
            for s in range(STAGES - 1):
                pg = f"pp{s}{s + 1}" if pairs else "pp"
                to = dict(peer=s + 1) if peer else {}
                back = dict(peer=s) if peer else {}
                if stopped and s == hang:           # never sends
                    break
                if stopped and s + 1 == hang:       # sends, never received
                    w.op(s, pg, step, "send", 1 << 20, int(ready), None, **to)
                    break
                end = max(ready, free[s + 1]) + 2 * MS
                w.op(s, pg, step, "send", 1 << 20, int(ready), int(end), **to)
                w.op(s + 1, pg, step, "recv", 1 << 20, int(free[s + 1]), int(end), **back)
                free[s] = end
                ready = end + comp(s + 1, step)
            else:
                free[STAGES - 1] = ready
            if stopped:
                # the stage after the hung one waits in its receive; stage 0 in all_reduce
                if hang + 1 < STAGES:
                    pg = f"pp{hang}{hang + 1}" if pairs else "pp"
                    w.op(hang + 1, pg, step, "recv", 1 << 20, int(free[hang + 1]), None,
                         **(dict(peer=hang) if peer else {}))
                w.op(0, "world", step, "all_reduce", 64 << 20, int(free[0]), None)
                w.end(int(free.max()) + 60_000 * MS)
                return
            end = free.max() + 3 * MS
            for r in range(STAGES):
                w.op(r, "world", step, "all_reduce", 64 << 20, int(free[r]), int(end))
            free[:] = end
        w.end(int(free.max()) + MS)


def diagnose(tmp_path, **kw):
    path = tmp_path / "t.jsonl"
    write_pipeline(path, **kw)
    reports, _ = feed_trace(Engine(), path)
    return [(r.kind, [s.rank for s in r.suspects]) for r in reports]


@pytest.mark.parametrize("peer", [True, False])
def test_two_rank_groups_imply_the_peer(tmp_path, peer):
    assert diagnose(tmp_path, pairs=True, peer=peer, hang=2) == [("noncomm_hang", [2])]
    assert diagnose(tmp_path, pairs=True, peer=peer, slow=3) == [("noncomm_slow", [3])]


def test_a_rank_waiting_in_an_unmatched_receive_is_not_the_culprit(tmp_path, caplog):
    """Rank 3 waits in its receive from rank 2 and never reaches the all_reduce: it is not
    absent, so rank 2 alone is named."""
    with caplog.at_level(logging.WARNING):
        found = diagnose(tmp_path, pairs=False, peer=False, hang=2)
    assert found == [("noncomm_hang", [2])]
    warned = [r.getMessage() for r in caplog.records if "carry no peer" in r.getMessage()]
    assert len(warned) == 1 and "'pp'" in warned[0] and "write `peer`" in warned[0]


def test_time_waiting_in_an_unmatched_receive_is_not_compute(tmp_path):
    """Once rank 1 is slow, stages 2 and 3 wait longer in their receives. Counted as their own
    time, that wait made rank 3 (last into every all_reduce) look slow. (Rank 1 itself delays
    nobody at the all_reduce: a pipeline stage is compared with the same stage of other
    replicas, and this job has none, with or without peers.)"""
    with_peer = diagnose(tmp_path, pairs=False, peer=True, slow=1)
    assert diagnose(tmp_path, pairs=False, peer=False, slow=1) == with_peer
    assert not [k for k, ranks in with_peer if {2, 3} & set(ranks)]
    assert diagnose(tmp_path, pairs=False, peer=False, slow=3) == [("noncomm_slow", [3])]


def _dead_nic_job(path, peer: bool) -> None:
    """Four hosts on one switch. Each iteration rank 0 sends to rank 1 on the four-rank
    communicator ``pp``, then all four all-reduce. In iteration 20 NIC 1 dies during the send:
    its transfer never ends, ranks 0 and 1 wait in the send/recv, 2 and 3 in the all-reduce."""
    nic = "node00{}/nic0".format
    with TraceWriter(path) as w:
        for r in range(STAGES):
            w.rank(r, f"node00{r}", gpu=f"node00{r}/gpu0", nic=nic(r))
        w.group("pp", list(range(STAGES)))
        w.group("dp", list(range(STAGES)))
        for it in range(21):
            t = 1_000 * MS + it * 100 * MS
            stuck = it == 20
            end = None if stuck else t + 2 * MS
            w.op(0, "pp", it, "send", 1 << 20, t, end, **(dict(peer=1) if peer else {}))
            w.op(1, "pp", it, "recv", 1 << 20, t, end, **(dict(peer=0) if peer else {}))
            w.conn(0, 1, 1 << 20, t, end, pg="pp", seq=it, path=[nic(0), "switch0", nic(1)])
            if stuck:
                for r in (2, 3):
                    w.op(r, "dp", it, "all_reduce", 4 << 20, t + 5 * MS, None)
                w.end(t + 60_000 * MS)
                return
            t += 5 * MS
            for r in range(STAGES):
                w.op(r, "dp", it, "all_reduce", 4 << 20, t, t + 10 * MS)
            for s in range(STAGES):
                d = (s + 1) % STAGES
                w.conn(s, d, 3 << 20, t, t + 9 * MS, pg="dp", seq=it,
                       path=[nic(s), "switch0", nic(d)])


@pytest.mark.parametrize("peer", [True, False])
def test_a_stuck_transfer_under_unmatched_calls_is_a_comm_hang(tmp_path, peer):
    """Without peers the send/recv is no call both entered; its conn record still shows the
    transfer that stopped, and the all-reduce waits for it, not for rank 0 or 1."""
    from c4.topology.builders import single_switch

    path = tmp_path / "t.jsonl"
    _dead_nic_job(path, peer)
    reports, _ = feed_trace(Engine(single_switch(STAGES)), path)
    assert [r.kind for r in reports] == ["comm_hang"]
    top = {(s.type, s.id) for s in reports[0].suspects if s.score == reports[0].suspects[0].score}
    assert ("nic", "node001/nic0") in top or ("nic", "node000/nic0") in top
    assert top <= {("nic", "node000/nic0"), ("nic", "node001/nic0"),
                   ("link", "node000/nic0~switch0"), ("link", "node001/nic0~switch0"),
                   ("switch", "switch0")}
