"""Per-sender limits on a real daemon: rate per sender, jobs, message size, records per batch.
Each gives the sender a clear status, and other senders keep being served."""

from __future__ import annotations

import threading

import grpc
import pytest

from c4.proto import c4_pb2, c4_pb2_grpc
from c4.security.channel import ClientSecurity
from collectors.sidecar.outbox import Outbox
from collectors.sidecar.spill import Spill
from diagnosis.client import DaemonClient, DaemonError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.jobs import JobLimits
from diagnosis.daemon.limits import RateLimiter
from diagnosis.daemon.server import Daemon
from tests.support.frames import group_info, op_batch, rank_info
from tests.support.services import wait_for

pytestmark = [pytest.mark.network]
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def _req(sidecar: str, seq: int, body: c4_pb2.IngestRequest) -> c4_pb2.IngestRequest:
    body.sidecar, body.seq = sidecar, seq
    return body


def _daemon(**config) -> tuple[Daemon, DaemonClient]:
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://", **config))
    d.start()
    return d, DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())


def test_token_bucket_refills_at_the_rate():
    now = [0.0]
    lim = RateLimiter(10, 20, clock=lambda: now[0])
    assert sum(lim.allow("a") for _ in range(50)) == 20  # the burst
    assert lim.allow("b"), "each sidecar has its own bucket"
    now[0] += 1.0
    assert sum(lim.allow("a") for _ in range(50)) == 10  # one second of refill
    assert lim.refused == 30 + 40
    assert all(RateLimiter(0).allow("x") for _ in range(1000)), "0: no limit"


def test_bucket_table_is_bounded():
    lim = RateLimiter(1, 1, max_keys=100, clock=lambda: 0.0)
    for i in range(1000):
        lim.allow(f"sidecar-{i}")
    assert len(lim._buckets) == 100


def test_rate_limit_refuses_the_hog_and_serves_the_others():
    # "localhost" binds both loopback families: the polite sender comes from another address
    d = Daemon(DaemonConfig(listen="localhost:0", store="memory://", max_requests_per_second=5))
    d.start()
    c = DaemonClient(f"127.0.0.1:{d.port}", timeout=5.0, security=ClientSecurity())
    polite = DaemonClient(f"[::1]:{d.port}", timeout=5.0, security=ClientSecurity())
    try:
        c.send(_req("hog", 1, rank_info("lim", 0, 2, "node0")))
        codes = []
        for seq in range(2, 40):
            try:
                c.send(_req("hog", seq, op_batch("lim", 0, range(seq * 10, seq * 10 + 10))))
                codes.append(None)
            except DaemonError as exc:
                codes.append(exc.code)
                assert "retry later" in str(exc) and "requests/s" in str(exc)
        assert codes.count(EXHAUSTED) >= 20, codes
        # the polite sender has its own bucket: served while the hog is refused
        assert not polite.send(_req("polite", 1, rank_info("lim", 1, 2, "node1"))).code
        assert not polite.send(_req("polite", 2, op_batch("lim", 1, range(10)))).code
        assert d.ingest.rejected_by_code["RESOURCE_EXHAUSTED"] == codes.count(EXHAUSTED)
    finally:
        polite.close()
        c.close()
        d.stop(grace=1)


def test_on_a_stream_everything_after_a_refusal_is_refused_too():
    """So a sidecar that resends from the first refused request keeps its order."""
    d, c = _daemon(max_requests_per_second=2)
    try:
        reqs = [_req("burst", 1, rank_info("order", 0, 1, "node0"))] + [
            _req("burst", s, op_batch("order", 0, range(s * 5, s * 5 + 5))) for s in range(2, 30)]
        channel = grpc.insecure_channel(f"127.0.0.1:{d.port}")
        acks = list(c4_pb2_grpc.IngestStub(channel).Stream(iter(reqs), timeout=20))
        channel.close()
        codes = [a.code for a in sorted(acks, key=lambda a: a.seq)]
        assert len(codes) == len(reqs)
        first = codes.index(EXHAUSTED.value[0])
        assert first >= 1 and all(code == 0 for code in codes[:first])
        assert all(code == EXHAUSTED.value[0] for code in codes[first:])
    finally:
        c.close()
        d.stop(grace=1)


def test_outbox_resends_what_was_refused_for_the_rate(tmp_path):
    """RESOURCE_EXHAUSTED is not a final rejection: the sidecar backs off and everything
    arrives, in order, none rejected."""
    d, c = _daemon(max_requests_per_second=20)  # bursts of 40
    outbox = Outbox("slowed", Spill(tmp_path / "spill", 1 << 26), memory_max_bytes=1 << 26,
                    max_inflight=64, spill_after_s=5.0, security=ClientSecurity())
    stop = threading.Event()
    runner = threading.Thread(target=outbox.run, args=(f"127.0.0.1:{d.port}", stop),
                              kwargs={"reconnect_max_s": 0.5}, daemon=True)
    try:
        outbox.put(rank=rank_info("paced", 0, 1, "node0").rank)
        outbox.put(group=group_info("paced", "0", [0]).group)
        for i in range(100):
            outbox.put(ops=op_batch("paced", 0, range(i * 10, i * 10 + 10)).ops)
        runner.start()
        wait_for(lambda: c.jobs() and c.jobs()[0].ops == 1000, 30,
                 what="all 1,000 records through the rate limit")
        wait_for(outbox.idle, 10, what="every request acknowledged")
        assert outbox.stats.throttled > 0, "the limit was hit"
        assert outbox.stats.rejected == 0 and outbox.stats.shipped == 102
        cols = c.ops("paced")
        assert sorted(cols["seq"].tolist()) == list(range(1000))
    finally:
        stop.set()
        runner.join(10)
        c.close()
        d.stop(grace=1)


def test_job_limit_refuses_new_jobs_only():
    d, c = _daemon(jobs=JobLimits(max_jobs=2), max_requests_per_second=0)
    try:
        c.send(_req("s", 1, rank_info("job-a", 0, 2, "node0")))
        c.send(_req("s", 2, rank_info("job-b", 0, 1, "node0")))
        with pytest.raises(DaemonError) as info:
            c.send(_req("s", 3, rank_info("job-c", 0, 1, "node0")))
        assert info.value.code == EXHAUSTED
        assert "--max-jobs" in str(info.value) and "job-c" in str(info.value)
        # known jobs keep being served: another rank, and its records
        assert not c.send(_req("s", 4, rank_info("job-a", 1, 2, "node1"))).code
        assert not c.send(_req("s", 5, op_batch("job-a", 1, range(10)))).code
        assert sorted(j.job for j in c.jobs()) == ["job-a", "job-b"]
    finally:
        c.close()
        d.stop(grace=1)


def test_message_size_and_records_per_batch_limits():
    d, c = _daemon(max_message_bytes=64 * 1024, max_records_per_batch=500)
    try:
        c.send(_req("s", 1, rank_info("big", 0, 1, "node0")))
        with pytest.raises(DaemonError) as info:  # ~1.5 MB: over the message limit
            c.send(_req("s", 2, op_batch("big", 0, range(30_000))))
        assert info.value.code == EXHAUSTED
        with pytest.raises(DaemonError) as info:
            c.send(_req("s", 3, op_batch("big", 0, range(501))))
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "limit is 500" in str(info.value)
        assert not c.send(_req("s", 4, op_batch("big", 0, range(500)))).code
        assert c.jobs()[0].ops == 500
    finally:
        c.close()
        d.stop(grace=1)
