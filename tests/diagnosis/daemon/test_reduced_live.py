"""The daemon's side of reduced telemetry, in process: linkstat peers named from endpoints,
detail requests to the hosts a report involves, and control messages down the right streams."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto import c4_pb2
from c4.proto.codec import LINKSTAT_COLUMNS, Columns
from c4.report import FaultReport, Suspect
from diagnosis.daemon.control import ControlHub
from diagnosis.daemon.detail import DetailConfig, DetailPuller, hosts_of_report
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.linkstats import LinkStatResolver
from diagnosis.store import RankRecord
from diagnosis.store.memory import MemoryStore

S = 1_000_000_000


def _linkstat(rows) -> Columns:
    """(src, dst, local, remote, t_ns)"""
    table: dict[str, int] = {}
    n = len(rows)
    c = {k: np.zeros(n, dt) for k, dt in LINKSTAT_COLUMNS.items()}
    for i, (src, dst, loc, rem, t) in enumerate(rows):
        c["src"][i], c["dst"][i], c["t_ns"][i] = src, dst, t
        c["local"][i] = table.setdefault(loc, len(table))
        c["remote"][i] = table.setdefault(rem, len(table))
    c["window_ns"][:] = S
    c["pg"][:] = -1
    c["transfers"][:] = 1
    c["open_since_ns"][:] = -1
    return Columns(c, list(table))


def test_linkstat_peers_come_from_the_other_nodes_endpoints():
    res = LinkStatResolver(hold_s=5)
    # node A's rank 0 talks to a socket whose owner no node has named yet
    assert res.add(_linkstat([(0, -1, "a:1", "b:1", S)]), now=0.0) is None
    assert res.waiting() == 1
    # node B's rank 5 owns b:1 (and knew nothing about a:1 either); both resolve now
    got = res.add(_linkstat([(5, -1, "b:1", "a:1", S), (5, 6, "b:2", "b:3", S)]), now=1.0)
    pairs = sorted(zip(got.src.tolist(), got.dst.tolist()))
    assert pairs == [(0, 5), (5, 0), (5, 6)] and res.waiting() == 0
    # a row nobody ever names is dropped after the hold, and counted
    assert res.add(_linkstat([(1, -1, "a:9", "z:9", S)]), now=2.0) is None
    assert res.add(_linkstat([]), now=10.0) is None
    assert res.dropped == 1 and res.waiting() == 0


RANKS = [RankRecord("j", 0, r, 8, f"node{r // 2}", gpu=f"node{r // 2}/gpu{r % 2}",
                    nic=f"node{r // 2}/nic0") for r in range(8)]


def _report(*suspects: Suspect, fid: str = "f1") -> FaultReport:
    return FaultReport(kind="comm_hang", first_seen_ns=100 * S, suspects=suspects,
                       summary="x", id=fid, job="j")


def test_hosts_of_a_report():
    hosts, ranks = hosts_of_report(_report(Suspect("gpu", "node2/gpu1", 0.9),
                                           Suspect("rank", "0", 0.5),
                                           Suspect("link", "leaf1~node3/nic0", 0.2)), RANKS, 8)
    assert hosts == ["node2", "node0", "node3"] and ranks == [0, 5, 6, 7]
    assert hosts_of_report(_report(Suspect("host", "node1", 1.0)), RANKS, 8)[0] == ["node1"]
    assert hosts_of_report(_report(*(Suspect("rank", str(r), 1.0) for r in range(8))), RANKS,
                           2)[0] == ["node0", "node1"]


def test_control_hub_streams_schedules_and_details():
    hub = ControlHub()
    got: dict[int, list] = {1: [], 2: []}
    a, b = hub.open(got[1].append), hub.open(got[2].append)
    hub.seen(a, c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job="j", rank=0, host="node0")))
    sched = c4_pb2.SampleSchedule(job="j", version=5)
    assert hub.publish(sched) == 1 and got[1][-1].control.schedule.version == 5
    # a stream that starts carrying the job gets the schedule at once
    hub.seen(b, c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job="j", rank=2, host="node1")))
    assert got[2][-1].control.schedule.version == 5 and got[2][-1].seq == 0
    req = c4_pb2.DetailRequest(job="j", fault_id="f", request=9)
    assert hub.request_detail(req, ["node1", "node7"]) == {"node1"}
    assert got[2][-1].control.detail.request == 9 and len(got[1]) == 1
    assert hub.expected(9) and not hub.expected(10)
    hub.close(b)
    assert hub.request_detail(req, ["node1"]) == set()


def test_detail_puller_asks_once_per_host_and_only_for_reduced_jobs():
    faults = FaultHub(MemoryStore())
    control = ControlHub()
    asked: list[c4_pb2.DetailRequest] = []
    for host in ("node0", "node1", "node2"):
        sid = control.open(lambda ack: asked.append(ack.control.detail))
        control.seen(sid, c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job="j", host=host)))
    reduced = {"j": True}
    reads: list[str] = []

    def ranks_of(job: str) -> list[RankRecord]:
        reads.append(job)
        return RANKS

    puller = DetailPuller(faults, control, ranks_of, lambda job: reduced[job],
                          DetailConfig(before_s=10, after_s=5))
    rep = _report(Suspect("gpu", "node1/gpu0", 0.9))
    assert puller.consider(rep, now_ns=200 * S) == {"node1"}
    (req,) = asked
    assert (req.from_ns, req.to_ns, req.fault_id) == (90 * S, 105 * S, "f1")
    assert puller.consider(rep, now_ns=200 * S) == set(), "asked once"
    assert len(reads) == 1, "a revision with the same suspects does not read the job's ranks"
    wider = _report(Suspect("gpu", "node1/gpu0", 0.9), Suspect("gpu", "node0/gpu0", 0.5))
    assert puller.consider(wider, now_ns=200 * S) == {"node0"}, "an update asks new hosts"
    # a host with no stream yet is asked once it has one, whatever the report's revisions
    far = _report(Suspect("host", "node3", 1), fid="f3")
    assert puller.consider(far, now_ns=200 * S) == set()
    sid = control.open(lambda ack: asked.append(ack.control.detail))
    control.seen(sid, c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job="j", host="node3")))
    assert puller.consider(far, now_ns=200 * S) == {"node3"}
    reduced["j"] = False
    assert puller.consider(_report(Suspect("host", "node2", 1), fid="f2")) == set()


def test_the_governor_cuts_budgets_to_what_the_daemon_can_follow_at_once():
    from diagnosis.daemon.scheduling import CUT_EVERY_S, HEADROOM, RAISE_EVERY_S, Governor, Load

    gov = Governor()
    budget = 200_000.0                        # one job's --job-records-per-s
    # the daemon applies 50k records per second of applying; its passes take a fifth of the
    # detectors' thread: it can follow 40k/s
    state = {"applied": 0, "apply_s": 0.0, "analysis_s": 0.0}

    def load(t: float, applied: int, queued: int, demand: float) -> Load:
        state["applied"] += applied
        state["apply_s"] += applied / 50_000
        state["analysis_s"] = 0.2 * t
        return Load(state["applied"], state["apply_s"], state["analysis_s"], queued, demand,
                    budget)

    for t in range(10):                       # 30k records/s sent and applied: nothing waits
        assert gov.govern(float(t), load(t, 30_000, 5_000, 30_000.0)) == 1.0
    assert gov.capacity == pytest.approx(40_000, rel=0.01)
    # a large job: 85k/s sent, 40k/s applied, the rest piles up
    queued = 0
    for t in range(10, 30):
        queued += 45_000
        scale = gov.govern(float(t), load(t, 40_000, queued, 85_000.0))
        if scale < 1.0:
            break
    assert t == 10, "at once"
    want = HEADROOM * 40_000 - queued / 20              # and work the queue off in 20 s
    assert gov.allowed == pytest.approx(want, rel=0.01) and scale == gov.allowed / budget
    assert gov.govern(t + CUT_EVERY_S / 2, load(t + 7, 0, queued, 85_000.0)) == scale, \
        "a cut reaches the jobs only at their next decisions: not again before"
    # the job, at its caps, sends 20k/s and the queue is gone: after a calm minute the jobs
    # may fill 70% of what the daemon does (whatever they send now), or half again
    cut, u = gov.allowed, t + 8
    while gov.allowed == cut and u < t + 3 * 60:
        u += 1
        gov.govern(float(u), load(u, 20_000, 0, 20_000.0))
    assert gov.allowed == pytest.approx(max(HEADROOM * 40_000, 1.5 * cut), rel=0.05)
    assert u - t >= RAISE_EVERY_S
    # a burst of windowed records (every node closes its window at once) is no overload
    assert gov.govern(u + 1.0, load(u + 1, 20_000, 150_000, 20_000.0)) == gov.allowed / budget
    # a daemon that keeps up for long enough goes back to the whole budgets
    for _ in range(10 * int(RAISE_EVERY_S)):
        u += 1
        last = gov.govern(float(u), load(u, 20_000, 0, 20_000.0))
    assert last == 1.0 and gov.allowed is None





def test_the_governor_cuts_budgets_to_what_the_store_commits():
    from diagnosis.daemon.scheduling import HEADROOM, Governor, Load

    gov = Governor()
    budget = 200_000.0
    # the detectors apply 500k records per second of applying; the store commits 100k rows
    # per second of committing (a 1,024-rank job at K = 4 sent as much into SQLite)
    state = {"applied": 0, "apply_s": 0.0, "stored": 0, "store_s": 0.0}

    def load(t: float, n: int, queued: int, demand: float) -> Load:
        state["applied"] += n
        state["apply_s"] += n / 500_000
        state["stored"] += n
        state["store_s"] += n / 100_000
        return Load(state["applied"], state["apply_s"], 0.0, queued, demand, budget,
                    state["stored"], state["store_s"])

    for t in range(10):                       # 50k records/s: the writer commits half the time
        assert gov.govern(float(t), load(t, 50_000, 5_000, 50_000.0)) == 1.0
    assert gov.capacity == pytest.approx(100_000, rel=0.01) and gov.bound_by == "store"
    assert gov.room(budget) == pytest.approx(HEADROOM * 100_000 / budget, rel=0.01), \
        "the job may grow only into what the store commits"
    # the job steps down to 110k/s: the writer commits all the time and its queue grows
    queued = 0
    for t in range(10, 30):
        queued += 10_000
        scale = gov.govern(float(t), load(t, 100_000, queued, 110_000.0))
        if scale < 1.0:
            break
    assert gov.allowed == pytest.approx(HEADROOM * 100_000 - queued / 20, rel=0.01)
    assert scale == pytest.approx(gov.allowed / budget)
    # without the store's counters the same daemon is judged by its detectors alone
    blind = Governor()
    for t in range(10):
        blind.govern(float(t), Load(t * 100_000, t * 0.2, 0.0, 0, 110_000.0, budget))
    assert blind.bound_by == "detectors" and blind.capacity == pytest.approx(500_000)
