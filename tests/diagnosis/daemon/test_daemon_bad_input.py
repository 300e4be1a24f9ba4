"""Bad telemetry gets a clear gRPC status; the daemon keeps serving and keeps what it stored."""

from __future__ import annotations

import grpc
import pytest

from c4.proto import c4_pb2
from diagnosis.client import DaemonClient, DaemonError, DaemonUnavailable
from tests.support.frames import group_info, op_batch, rank_info
from tests.support.services import free_port, start_daemon

pytestmark = [pytest.mark.network]


def _req(seq: int, body: c4_pb2.IngestRequest) -> c4_pb2.IngestRequest:
    body.sidecar = "test-sidecar"
    body.seq = seq
    return body


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon")
    port = free_port()
    svc = start_daemon(tmp, port)
    with DaemonClient(f"127.0.0.1:{port}") as client:
        client.send(_req(1, rank_info("good", 0, 1, "node0")))
        client.send(_req(2, op_batch("good", 0, range(10))))
        yield client
    svc.stop()


def _status_of(client: DaemonClient, req: c4_pb2.IngestRequest) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(DaemonError) as info:
        client.send(req)
    return info.value.code, str(info.value)


def test_truncated_column(daemon):
    req = _req(10, op_batch("good", 0, range(10)))
    req.ops.seq = req.ops.seq[:-3]
    code, msg = _status_of(daemon, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'seq'" in msg and "bytes" in msg


def test_string_index_out_of_range(daemon):
    req = _req(11, op_batch("good", 0, range(4)))
    del req.ops.strings[:]
    code, msg = _status_of(daemon, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "strings" in msg


def test_unknown_job(daemon):
    code, msg = _status_of(daemon, _req(12, op_batch("nobody", 0, range(3))))
    assert code == grpc.StatusCode.NOT_FOUND and "nobody" in msg and "RankInfo" in msg


def test_group_for_unknown_job_and_bad_group(daemon):
    assert _status_of(daemon, _req(13, group_info("nobody", "0", [0])))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert _status_of(daemon, _req(14, group_info("good", "0", [0, 0])))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT


def test_mistyped_request(daemon):
    code, msg = _status_of(daemon, _req(15, c4_pb2.IngestRequest()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no body" in msg
    code, msg = _status_of(daemon, c4_pb2.IngestRequest(seq=16, rank=c4_pb2.RankInfo()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "sidecar" in msg


def test_oversized_message(daemon):
    big = _req(17, op_batch("good", 0, range(10)))
    big.ops.strings.append("x" * (65 * 1024 * 1024))
    code, _ = _status_of(daemon, big)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_still_serving_and_nothing_harmed(daemon):
    cols = daemon.ops("good")
    assert sorted(cols["seq"].tolist()) == list(range(10))
    ack = daemon.send(_req(2, op_batch("good", 0, range(10))))  # a resend is a duplicate
    assert ack.duplicate
    assert daemon.status().batches_rejected >= 6


def test_no_daemon_gives_a_clear_message():
    with DaemonClient(f"127.0.0.1:{free_port()}", timeout=1.0) as client, \
            pytest.raises(DaemonUnavailable, match="c4 daemon"):
        client.jobs()


def test_absurd_rank_ids_are_refused(daemon):
    big = _req(18, rank_info("good", 2_000_000_000, 2_000_000_001, "node0"))
    code, msg = _status_of(daemon, big)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "world_size" in msg
    ops = _req(19, op_batch("good", 1_500_000_000, range(3)))
    code, msg = _status_of(daemon, ops)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "rank" in msg


def test_collector_counters_that_do_not_decode_are_refused(daemon):
    cols = c4_pb2.CollectorColumns(job="good", count=2, rank=b"\0" * 8, recorded=b"\0" * 16,
                                   dropped=b"\0" * 16, shipped=b"\0" * 16, t_ns=b"\0" * 12,
                                   leaving=b"\0" * 2)
    req = _req(20, c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(collector_columns=[cols])))
    code, msg = _status_of(daemon, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "SidecarStats" in msg and "'t_ns'" in msg
    cols.t_ns = b"\0" * 16
    ok = _req(21, c4_pb2.IngestRequest(stats=c4_pb2.SidecarStats(collector_columns=[cols])))
    assert not daemon.send(ok).code
