"""Conn records without ``pg``/``seq`` (optional in the trace format) are still transfers: their
durations time the network. Intervals of sampled socket counters, which the daemon makes into
the same records, are not: they move as much as the job asks for."""

from __future__ import annotations

import json

from c4.proto.codec import Columns
from diagnosis.engine import ConnRecords, Engine
from diagnosis.trace.feed import feed_trace
from diagnosis.trace.reader import GroupInfo, RankInfo, read_trace
from diagnosis.trace.synth import SynthJob


def _job_without_calls_on_conns(tmp_path):
    job = SynthJob(slow_components={"node005/nic1": 2.0})
    topo = job.topology()
    full, path = tmp_path / "full.jsonl", tmp_path / "trace.jsonl"
    job.write(full, topo)
    with open(full) as fin, open(path, "w") as fout:
        for line in fin:
            rec = json.loads(line)
            if rec.get("type") == "conn":
                rec.pop("pg", None)
                rec.pop("seq", None)
            fout.write(json.dumps(rec) + "\n")
    return topo, path


def test_transfers_without_their_call_localize_a_slow_nic(tmp_path):
    topo, path = _job_without_calls_on_conns(tmp_path)
    reports, _ = feed_trace(Engine(topo), path)
    assert [r.kind for r in reports] == ["comm_slow"]
    assert reports[0].evidence["via"] == "connections"
    assert ("nic", "node005/nic1") in [(s.type, s.id) for s in reports[0].suspects[:2]]


def test_sampled_intervals_without_their_call_do_not_time_the_network(tmp_path):
    """The same records as the daemon's socket samples: the slow NIC is found, as without
    conn records, from the communicators' own transfer times."""
    topo, path = _job_without_calls_on_conns(tmp_path)
    eng = Engine(topo)
    with open(path, "rb") as fh:
        for item in read_trace(fh, name=str(path)):
            if isinstance(item, RankInfo):
                eng.add_rank(item.rank, item.host, item.gpu, item.nic)
            elif isinstance(item, GroupInfo):
                eng.add_group(item.pg, item.ranks)
            elif isinstance(item, Columns):
                eng.add_ops(item)
            elif isinstance(item, ConnRecords):
                eng.add_conns(item, sampled=True)
    reports = eng.finish()
    assert [r.kind for r in reports] == ["comm_slow"]
    assert reports[0].evidence["via"] == "communicators"
