"""feed_trace on version 2 traces: the sampling factor and the progress, linkstat and port
batches reach the engine, counted, through the sequential and the parallel reader, and traces
joined together are judged at the sample every part keeps."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from diagnosis.engine import Engine
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace
from diagnosis.trace.synth import SynthJob
from tests.support.v2trace import to_v2


class SpyEngine(Engine):
    """An engine that remembers what the feed handed it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.samples: list[int] = []
        self.got: dict[type, list] = {ProgressRecords: [], LinkStatRecords: [], PortRecords: []}

    def set_sample(self, k: int) -> None:
        self.samples.append(k)
        super().set_sample(k)

    def add_progress(self, recs: ProgressRecords) -> None:
        self.got[ProgressRecords].append(recs)
        super().add_progress(recs)

    def add_linkstats(self, recs: LinkStatRecords) -> None:
        self.got[LinkStatRecords].append(recs)
        super().add_linkstats(recs)

    def add_ports(self, recs: PortRecords) -> None:
        self.got[PortRecords].append(recs)
        super().add_ports(recs)

    def rows(self, cls: type) -> int:
        return sum(len(r) for r in self.got[cls])


@pytest.fixture(scope="module")
def v2_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("v2")
    job = SynthJob(hosts=4, gpus_per_host=2, iterations=30)
    job.write(d / "v1.jsonl", job.topology())
    counts = to_v2(d / "v1.jsonl", d / "v2.jsonl", sample=4)
    return d, counts


@pytest.mark.parametrize("workers", [0, 1])
def test_v2_records_and_sample_reach_the_engine(v2_trace, workers):
    d, counts = v2_trace
    eng = SpyEngine()
    _, stats = feed_trace(eng, d / "v2.jsonl", block_bytes=16384, workers=workers,
                          min_parallel_bytes=0)
    assert eng.samples == [4] and eng.sample == 4 and stats.sample == 4
    assert (stats.progress, stats.linkstats, stats.ports, stats.ops, stats.conns) == (
        counts["progress"], counts["linkstat"], counts["port"], counts["op"], 0)
    assert eng.rows(ProgressRecords) == counts["progress"] > 0
    assert eng.rows(LinkStatRecords) == counts["linkstat"] > 0
    assert eng.rows(PortRecords) == counts["port"] > 0
    assert stats.records == sum(counts.values()) and not stats.sorted
    assert eng.records == stats.ops + stats.progress + stats.linkstats + stats.ports


def test_v1_trace_followed_by_v2_trace_is_judged_at_the_v2_sample(v2_trace, caplog):
    d, counts = v2_trace
    mixed = d / "mixed.jsonl"
    v1 = (d / "v1.jsonl").read_bytes()
    # the v1 part's end record would stop the clock early: leave it out
    head = b"".join(ln for ln in v1.splitlines(keepends=True) if b'"end"' not in ln)
    mixed.write_bytes(head + (d / "v2.jsonl").read_bytes())
    caplog.set_level(logging.WARNING)
    eng = SpyEngine()
    _, stats = feed_trace(eng, mixed)
    assert eng.samples == [1, 4] and stats.sample == 4 and stats.metas == 2
    assert stats.progress == counts["progress"] and stats.conns > 0
    assert stats.sorted         # the second part starts over at the job's start
    assert any("sample 1, then 4" in r.getMessage() for r in caplog.records)


def test_different_samples_combine_to_the_calls_every_part_keeps(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.meta("a", sample=4)
        w.progress(0, "g", 10, 0)
        w.meta("b", sample=6)
        w.progress(0, "g", 20, 1)
    eng = SpyEngine()
    _, stats = feed_trace(eng, path)
    assert eng.samples == [4, 12] and stats.sample == 12
    assert np.concatenate([r.entered for r in eng.got[ProgressRecords]]).tolist() == [0, 1]
