"""Fuzz the ingest path: arbitrary and mutated IngestRequest bytes, and well-formed requests with
wrong contents, through ``to_write`` and through a real in-process daemon's Send RPC. The only
acceptable outcomes are a store write / an acknowledgement, or a rejection with a gRPC status;
the daemon must keep serving and keep storing good requests afterwards."""

from __future__ import annotations

import itertools

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import event, given
from hypothesis import strategies as st

from c4.proto import c4_pb2
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.decode import Rejected, to_write
from diagnosis.daemon.server import Daemon
from diagnosis.store import Write
from tests.fuzz.fuzzkit import fuzz, good_ops, ingest_requests, mutate

pytestmark = [pytest.mark.network]

_SEND = "/c4.v1.Ingest/Send"
# statuses the ingest path hands out on purpose; UNKNOWN would mean an exception escaped
_EXPECTED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}


def _seed_requests() -> list[bytes]:
    rank = c4_pb2.IngestRequest(sidecar="s", seq=1, rank=c4_pb2.RankInfo(
        job="fuzz", rank=0, world_size=2, host="node0"))
    group = c4_pb2.IngestRequest(sidecar="s", seq=2, group=c4_pb2.GroupInfo(
        job="fuzz", pg="0", ranks=[0, 1]))
    ops = c4_pb2.IngestRequest(sidecar="s", seq=3, ops=good_ops("fuzz", 1, range(5)))
    return [r.SerializeToString() for r in (rank, group, ops)]


SEEDS = _seed_requests()


def _parse(data: bytes) -> c4_pb2.IngestRequest | None:
    req = c4_pb2.IngestRequest()
    try:
        req.ParseFromString(data)
    except DecodeError:
        return None
    return req


def _check_to_write(req: c4_pb2.IngestRequest) -> None:
    try:
        out = to_write(req, max_records=1000)
    except Rejected as exc:
        assert isinstance(exc.code, grpc.StatusCode) and exc.message
        event("rejected")
        return
    assert isinstance(out, Write)
    event(f"accepted {type(out.body).__name__}")


@fuzz(300)
@given(st.binary(max_size=400))
def test_to_write_arbitrary_bytes(data):
    req = _parse(data)
    if req is not None:
        _check_to_write(req)


@fuzz(300)
@given(st.data())
def test_to_write_mutated_requests(data):
    seed = data.draw(st.sampled_from(SEEDS))
    req = _parse(mutate(seed, data.draw))
    if req is not None:
        _check_to_write(req)


@fuzz(100)
@given(ingest_requests())
def test_to_write_wrong_contents(req):
    _check_to_write(req)


# ----- a real daemon -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz-daemon")
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store=f"sqlite:///{tmp / 'c4.db'}",
                            analyze_interval_s=0.2, max_records_per_batch=10_000))
    d.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{d.port}")
    raw = channel.unary_unary(_SEND)   # no serializers: bytes in, bytes out
    for seed in SEEDS[:2]:
        raw(seed, timeout=10)
    yield d, raw
    channel.close()
    d.stop()


_good_seq = itertools.count(1_000_000)


def _send(raw, data: bytes) -> None:
    try:
        ack = c4_pb2.IngestAck.FromString(raw(data, timeout=20))
    except grpc.RpcError as exc:
        code = exc.code()
        assert code in _EXPECTED, f"status {code}: {exc.details()}"
        if _parse(data) is None:   # bytes that are no IngestRequest: said so, not INTERNAL
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert "not a valid c4.v1.IngestRequest protobuf" in exc.details()
        assert exc.details()
        return
    assert ack.code == 0


def _still_serving(d: Daemon, raw) -> None:
    """A good request after the fuzzed ones is acknowledged and stored."""
    seq = next(_good_seq)
    before = d.live.records_total
    req = c4_pb2.IngestRequest(sidecar="fuzz-check", seq=seq, ops=good_ops("fuzz", 0,
                                                                          range(seq, seq + 3)))
    ack = c4_pb2.IngestAck.FromString(raw(req.SerializeToString(), timeout=20))
    assert ack.code == 0 and not ack.duplicate
    assert d.live.records_total == before + 3


@fuzz(120)
@given(data=st.data())
def test_daemon_send_mutated_bytes(daemon, data):
    _, raw = daemon
    seed = data.draw(st.sampled_from(SEEDS))
    payload = data.draw(st.binary(max_size=200)) if data.draw(st.booleans()) else \
        mutate(seed, data.draw)
    _send(raw, payload)


@fuzz(80)
@given(reqs=st.lists(ingest_requests(), min_size=1, max_size=4))
def test_daemon_send_wrong_contents(daemon, reqs):
    d, raw = daemon
    for req in reqs:
        _send(raw, req.SerializeToString())
    _still_serving(d, raw)


def test_daemon_serves_after_fuzzing(daemon):
    d, raw = daemon
    _still_serving(d, raw)
    assert d.writer.store_errors == 0
    assert d._analyzer.is_alive() and d.writer._thread.is_alive()
