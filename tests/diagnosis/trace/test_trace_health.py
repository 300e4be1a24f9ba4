"""The health record kind: written, read back, carried through the proto, bad lines named."""

from __future__ import annotations

from pathlib import Path

import pytest

from c4.errors import FormatError
from c4.proto import c4_pb2
from c4.proto.health import HealthRecord, health_batch
from diagnosis.trace.reader import RankInfo, read_trace
from diagnosis.trace.writer import TraceWriter

SAMPLE = HealthRecord("node1", 5_000, "node1/gpu0", {"temp_c": 91.0, "sm_clock_mhz": 1110.0},
                      ("hw_thermal_slowdown",))
EVENT = HealthRecord("node1", 6_000, "node1/gpu0", event="xid", code=79,
                     text="GPU has fallen off the bus.")
HOST = HealthRecord("node2", 7_000, values={"psi_cpu_some_avg10": 42.5})


def test_round_trip_through_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.rank(0, "node1", gpu="node1/gpu0")
        for r in (SAMPLE, EVENT, HOST):
            w.health(r)
        w.end(10_000)
    items = list(read_trace(path))
    assert isinstance(items[0], RankInfo)
    assert [i for i in items if isinstance(i, HealthRecord)] == [SAMPLE, EVENT, HOST]


def test_round_trip_through_the_proto() -> None:
    batch = c4_pb2.HealthBatch.FromString(health_batch([SAMPLE, EVENT, HOST], "j", 2)
                                          .SerializeToString())
    assert (batch.job, batch.attempt) == ("j", 2)
    assert [HealthRecord.from_proto(m) for m in batch.samples] == [SAMPLE, EVENT, HOST]
    assert c4_pb2.IngestRequest(health=batch).WhichOneof("body") == "health"


@pytest.mark.parametrize("line, field", [
    ('{"type": "health", "t_ns": 1, "values": {"a": 1}}', "host"),
    ('{"type": "health", "host": "h", "t_ns": 1}', "values"),
    ('{"type": "health", "host": "h", "t_ns": 1, "values": {"a": "hot"}}', "values"),
    ('{"type": "health", "host": "h", "t_ns": 1, "event": "gremlins"}', "event"),
    ('{"type": "health", "host": "h", "t_ns": 1, "reasons": "hw"}', "reasons"),
    ('{"type": "health", "host": "h", "t_ns": "x", "event": "xid"}', "t_ns"),
])
def test_bad_health_line_names_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "rank", "rank": 0, "host": "h"}\n' + line + "\n")
    with pytest.raises(FormatError) as err:
        list(read_trace(path))
    assert err.value.line == 2 and err.value.field == field


def test_record_refuses_nothing_and_nan() -> None:
    with pytest.raises(ValueError, match="carries values, reasons or an event"):
        HealthRecord("h", 1)
    with pytest.raises(ValueError, match="leave a missing value out"):
        HealthRecord("h", 1, values={"temp_c": float("nan")})
