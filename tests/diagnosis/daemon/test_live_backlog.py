"""The live detectors run beside the writer, not in its way: acknowledgements go on during an
analysis pass, the backlog between them is bounded (the writer waits past it), the lag is
measured, a silent job leaves the view and comes back from the store, and sidecars beyond the
stream limit are told to back off instead of waiting for ever."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.proto.codec import PROGRESS_COLUMNS, Columns, decode_ops
from c4.security.channel import ClientSecurity
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.live import LiveView
from diagnosis.daemon.server import Daemon
from diagnosis.store import BatchRows, GroupRecord, OpRows, RankRecord, Write, open_store
from tests.support.frames import T0, group_info, op_batch, rank_info
from tests.support.services import wait_for


def _ops(seq: int, n: int = 60, job: str = "j") -> Write:
    return Write("s", seq, OpRows(job, 0, decode_ops(op_batch(job, 0, range(n)).ops)))


def _register(job: str = "j") -> list[Write]:
    return [Write("s", 1, RankRecord(job, 0, 0, 2, "n0")),
            Write("s", 2, RankRecord(job, 0, 1, 2, "n1")),
            Write("s", 3, GroupRecord(job, 0, "0", (0, 1)))]


def test_backlog_is_bounded_and_lag_measured():
    live = LiveView(FaultHub(open_store("memory://")), max_backlog_records=100)
    assert live.lag() == 0.0
    live.apply(_register())
    live.apply([_ops(4)])   # 63 rows waiting
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (live.apply([_ops(5)]), done.set()))
    waiter.start()
    assert not done.wait(0.5), "the writer must wait while the backlog is full"
    assert live.backlog() == 63 and live.lag() >= 0.5
    live.drain()             # the detectors catch up: the writer goes on
    assert done.wait(5)
    waiter.join()
    live.drain()
    assert live.backlog() == 0 and live.records_total == 120
    assert live.lag() > 0, "applied but not yet analysed"
    live.analyze()
    assert live.lag() == 0.0
    assert live._jobs[("j", 0)].records == 120


def test_a_silent_job_leaves_the_view_and_comes_back_from_the_store():
    store = open_store("memory://")
    store.write(_register())
    live = LiveView(FaultHub(store), store=store, idle_s=60.0)
    live.apply(_register())
    live.drain()
    live._jobs[("j", 0)].heard -= 120  # two minutes of silence
    live._evict_idle()
    assert live.jobs() == 0
    live.apply([_ops(4)])
    live.drain()
    st = live._jobs[("j", 0)]
    assert sorted(st.ranks) == [0, 1] and list(st.groups) == ["0"]
    assert st.records == 60 and st.engine.dropped == 0, "its records land in its groups"


@pytest.mark.network
def test_acknowledgements_go_on_during_a_long_analysis_pass():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://"))
    d.start()
    c = DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())
    try:
        c.send(_req(rank_info("busy", 0, 1, "n0"), 1))
        c.send(_req(group_info("busy", "0", [0]), 2))
        with d.live._lock:   # the detectors are busy with one long pass
            t0 = time.monotonic()
            for seq in range(3, 8):
                assert not c.send(_req(op_batch("busy", 0, range(seq * 10, seq * 10 + 10)),
                                       seq)).code
            assert time.monotonic() - t0 < 4.0
            assert d.live.backlog() >= 50
        wait_for(lambda: d.live.backlog() == 0, 10, what="the detectors catch up")
        assert d.live._jobs[("busy", 0)].records == 50
    finally:
        c.close()
        d.stop(grace=1)


def _req(body: c4_pb2.IngestRequest, seq: int, sidecar: str = "a") -> c4_pb2.IngestRequest:
    body.sidecar, body.seq = sidecar, seq
    return body


@pytest.mark.network
def test_streams_beyond_the_limit_are_refused_not_left_waiting():
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", workers=8, max_streams=4))
    d.start()
    stop = threading.Event()
    acked: dict[int, bool] = {}
    refused: dict[int, str] = {}

    def sidecar(i: int) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{d.port}")

        def requests():
            yield _req(c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="h")), 1, f"s{i}")
            stop.wait(20)

        try:
            for _ack in c4_pb2_grpc.IngestStub(channel).Stream(requests()):
                acked[i] = True
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                refused[i] = exc.details()
        finally:
            channel.close()

    threads = [threading.Thread(target=sidecar, args=(i,), daemon=True) for i in range(6)]
    c = DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())
    try:
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) + len(refused) == 6, 20, what="every sidecar answered")
        assert len(acked) == 4 and len(refused) == 2
        assert all("retry later" in m and "--max-streams" in m for m in refused.values())
        assert c.status().version, "queries are still served"
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        c.close()
        d.stop(grace=1)


@pytest.mark.network
def test_a_sidecar_refused_for_the_stream_limit_backs_off_then_delivers(tmp_path):
    from collectors.sidecar.outbox import Outbox
    from collectors.sidecar.spill import Spill

    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", workers=4, max_streams=1))
    d.start()
    release = threading.Event()
    held = threading.Event()

    def holder() -> None:  # the one stream the daemon allows
        channel = grpc.insecure_channel(f"127.0.0.1:{d.port}")

        def requests():
            yield _req(c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(host="h")), 1, "holder")
            release.wait(30)

        try:
            for _ack in c4_pb2_grpc.IngestStub(channel).Stream(requests()):
                held.set()
        except grpc.RpcError:
            pass
        finally:
            channel.close()

    hold = threading.Thread(target=holder, daemon=True)
    outbox = Outbox("late", Spill(tmp_path / "spill", 1 << 26), memory_max_bytes=1 << 26,
                    max_inflight=8, spill_after_s=30.0, security=ClientSecurity())
    stop = threading.Event()
    runner = threading.Thread(target=outbox.run, args=(f"127.0.0.1:{d.port}", stop),
                              kwargs={"reconnect_max_s": 1.0}, daemon=True)
    c = DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())
    try:
        hold.start()
        wait_for(held.is_set, 10, what="the first stream held")
        outbox.put(rank=rank_info("late", 0, 1, "node0").rank)
        runner.start()
        time.sleep(3.0)  # the outbox is refused for this long: count its attempts
        assert 1 <= outbox.stats.reconnects <= 8, outbox.stats.reconnects
        release.set()
        wait_for(lambda: any(j.job == "late" for j in c.jobs()), 20,
                 what="the refused sidecar's request delivered once a stream was free")
    finally:
        release.set()
        stop.set()
        runner.join(10)
        c.close()
        d.stop(grace=1)


def test_a_jobs_op_batches_in_a_row_reach_its_engine_as_one_batch():
    """One op batch per node and request, a thousand a second for a job of a thousand nodes:
    those queued one after the other go to the job's engine together (each batch costs the
    engine a share of work whatever its size); other writes, and another job's, keep their
    place in the order."""
    live = LiveView(FaultHub(open_store("memory://")))
    live.apply(_register("j") + _register("k"))
    live.drain()
    engines = {job: live._jobs[(job, 0)].engine for job in ("j", "k")}
    batches: dict[str, list[int]] = {"j": [], "k": []}
    for job, eng in engines.items():
        add = eng.add_ops
        eng.add_ops = lambda cols, job=job, add=add: (batches[job].append(len(cols)), add(cols))
    for seq in range(10, 20):              # ten commits of one batch each
        live.apply([_ops(seq)])
    live.apply([_ops(20, job="k"), _ops(21), Write("s", 22, GroupRecord("j", 0, "1", (0, 1))),
                _ops(23), _ops(24)])
    live.drain()
    assert batches == {"j": [600, 60, 120], "k": [60]}
    assert live._jobs[("j", 0)].records == 780 and live.backlog() == 0
    assert engines["j"].records == 780


def _progress(rank: int, t_s: int, name: str) -> Write:
    """One node's progress at the end of window ``t_s``: rank ``rank`` on communicator
    ``name`` (each batch with its own string table, as each sidecar sends them)."""
    cols = {k: np.zeros(1, dtype=dt) for k, dt in PROGRESS_COLUMNS.items()}
    cols["rank"][0], cols["pg"][0], cols["op"][0], cols["peer"][0] = rank, 1, -1, -1
    cols["t_ns"][0] = T0 + t_s * 1_000_000_000
    cols["entered"][0] = cols["completed"][0] = 10 * t_s
    t = int(cols["t_ns"][0])
    return Write(f"s{rank}", t_s, BatchRows("j", 0, "progress", 1, t, t, b"",
                                            Columns(cols, ["unused", name])))


def test_a_jobs_progress_batches_in_a_row_reach_its_engine_as_one_batch():
    live = LiveView(FaultHub(open_store("memory://")))
    live.apply(_register("j"))
    live.drain()
    eng = live._jobs[("j", 0)].engine
    got: list[tuple[list[int], list[str]]] = []
    add = eng.add_progress

    def spy(recs, fill_open=False):
        got.append((recs.rank.tolist(), [recs.strings[p] for p in recs.pg.tolist()]))
        add(recs, fill_open)
    eng.add_progress = spy
    for t in (1, 2):                        # each node's batch its own commit
        live.apply([_progress(0, t, "0")])
        live.apply([_progress(1, t, "0")])
    live.drain()
    # one batch, each row's communicator named from its own batch's string table
    assert got == [([0, 1, 0, 1], ["0"] * 4)]
    assert live.backlog() == 0
