"""FaultReport <-> its protobuf message (the live fault stream and the query service)."""

from __future__ import annotations

import json

from c4.proto import c4_pb2
from c4.report import FaultReport, Suspect


def to_proto(report: FaultReport) -> c4_pb2.FaultReport:
    msg = c4_pb2.FaultReport(
        id=report.id, job=report.job, kind=report.kind,
        first_seen_ns=int(report.first_seen_ns), last_seen_ns=int(report.last_seen_ns),
        pg=report.pg or "", summary=report.summary,
        evidence_json=json.dumps(report.to_json()["evidence"]),
        state=report.state, revision=report.revision,
        causes_json=json.dumps(report.to_json()["causes"]) if report.causes else "")
    if report.seq is not None:
        msg.seq = int(report.seq)
    for s in report.suspects:
        sus = msg.suspects.add(type=s.type, id=s.id, score=s.score)
        if s.rank is not None:
            sus.rank = s.rank
    return msg


def from_proto(msg: c4_pb2.FaultReport) -> FaultReport:
    return FaultReport(
        kind=msg.kind,
        suspects=tuple(Suspect(s.type, s.id, s.score, s.rank if s.HasField("rank") else None)
                       for s in msg.suspects),
        first_seen_ns=msg.first_seen_ns,
        summary=msg.summary,
        pg=msg.pg or None,
        seq=msg.seq if msg.HasField("seq") else None,
        evidence=json.loads(msg.evidence_json) if msg.evidence_json else {},
        id=msg.id, job=msg.job, last_seen_ns=msg.last_seen_ns, state=msg.state,
        revision=msg.revision,
        causes=tuple(json.loads(msg.causes_json)) if msg.causes_json else ())
