"""Health batches from a sidecar: checked, stored as batches by every local backend, served back
through the Reduced query and written into an exported trace."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from c4.proto import c4_pb2
from c4.proto.codec import OP_COLUMNS, empty_columns
from c4.proto.health import HealthRecord, health_batch
from diagnosis.daemon.decode import Rejected, to_write
from diagnosis.daemon.jobs import JobBook
from diagnosis.export import write_trace
from diagnosis.store import RankRecord, Write, open_store
from diagnosis.trace.reader import read_trace

NOW = 20          # the daemon's clock for these checks: the records' times are near it
HOUR = 3600 * 10**9
RECORDS = [
    HealthRecord("node0", 10, "node0/gpu1", {"temp_c": 90.0}, ("hw_thermal_slowdown",)),
    HealthRecord("node0", 20, "node0/gpu1", event="xid", code=79, text="fell off the bus"),
]


def _req(batch: c4_pb2.HealthBatch, seq: int = 1) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(sidecar="sc0", seq=seq, health=batch)


@pytest.mark.parametrize("url", ["memory://", "sqlite://:memory:"])
def test_health_batch_stored_and_read_back(url: str) -> None:
    store = open_store(url)
    try:
        store.write([Write("sc0", 1, RankRecord("j", 0, 0, 1, "node0"))])
        w = to_write(_req(health_batch(RECORDS, "j"), seq=2), max_records=100, now_ns=NOW)
        assert (w.body.kind, w.body.count, w.body.t_lo, w.body.t_hi) == ("health", 2, 10, 20)
        store.write([w])
        [stored] = store.batches("j", kinds=["health"])
        got = c4_pb2.HealthBatch.FromString(stored.payload)
        assert [HealthRecord.from_proto(s) for s in got.samples] == RECORDS
    finally:
        store.close()


@pytest.mark.parametrize("batch, message", [
    (health_batch(RECORDS, ""), "HealthBatch.job is empty"),
    (c4_pb2.HealthBatch(job="j"), "holds 0 samples"),
    (c4_pb2.HealthBatch(job="j", samples=[c4_pb2.HealthSample(t_ns=1, event="xid")]),
     "sample 0 names no host"),
    (c4_pb2.HealthBatch(job="j", samples=[c4_pb2.HealthSample(host="h", t_ns=1)]),
     "sample 0 carries no values"),
    (c4_pb2.HealthBatch(job="j", samples=[c4_pb2.HealthSample(host="h", t_ns=NOW + 2 * HOUR,
                                                              event="xid")]),
     "sample 0 is stamped"),
])
def test_bad_health_batches_rejected(batch: c4_pb2.HealthBatch, message: str) -> None:
    with pytest.raises(Rejected) as err:
        to_write(_req(batch), max_records=100, now_ns=NOW)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and message in err.value.message


def test_unknown_job_rejected() -> None:
    book = JobBook()
    book.admit(RankRecord("j", 0, 0, 1, "node0"))
    w = to_write(_req(health_batch(RECORDS, "other")), max_records=100, now_ns=NOW)
    with pytest.raises(Rejected) as err:
        book.admit(w.body)
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_export_writes_health_lines(tmp_path: Path) -> None:
    chunk = c4_pb2.ReducedChunk(health=health_batch(RECORDS, "j"))
    ranks = [c4_pb2.RankInfo(job="j", rank=0, world_size=1, host="node0")]
    out = tmp_path / "t.jsonl"
    summary = write_trace(out, "j", ranks=ranks, groups=[], ops=empty_columns(OP_COLUMNS),
                          reduced=[chunk])
    assert summary.version == 2
    assert [i for i in read_trace(out) if isinstance(i, HealthRecord)] == RECORDS


@pytest.mark.parametrize("url", ["memory://", "sqlite://:memory:"])
def test_report_causes_survive_the_store(url: str) -> None:
    from c4.report import FaultReport, Suspect

    cause = {"kind": "thermal_slowdown", "target": "node0/gpu1", "summary": "hot",
             "action": "cool it", "severity": "warning", "hard": False, "since_ns": 5,
             "until_ns": 9, "score": 0.9, "evidence": {"temp_c": 91.0}}
    rep = FaultReport("noncomm_slow", (Suspect("gpu", "node0/gpu1", 0.9),), 5, "slow",
                      id="f1", job="j", revision=1, causes=(cause,))
    store = open_store(url)
    try:
        store.put_fault(rep)
        assert store.get_fault("f1").causes == (cause,)
        assert store.list_faults("j")[0].causes == (cause,)
    finally:
        store.close()
