"""NCCL Inspector output recorded on a real GPU job (fixtures/h200_four_ranks, see its README):
read as written, and diagnosed as the GPU check's live run diagnosed it: nothing for the healthy
job, the slow GPU of rank 2 for the other."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnosis.nccl.analyze import analyze_nccl
from diagnosis.nccl.inspector import find_inspector_files, read_inspector_file
from diagnosis.nccl.sources import read_sources

FIXTURES = Path(__file__).parent / "fixtures" / "h200_four_ranks"


def _records(folder: str):
    out = []
    for path in find_inspector_files(FIXTURES / folder):
        out.extend(read_inspector_file(path))
    return out


def test_every_line_is_read_with_its_kernel_times():
    for folder, rounds in (("healthy", 200), ("slow_rank2", 400)):
        batches = _records(folder)
        assert len(batches) == 4 and sum(len(b) for b in batches) == 4 * (2 * rounds + 1)
        for b in batches:
            size = np.asarray([c.nranks for c in b.comms])[b.comm]
            world = (size == 4) & (b.msg_bytes == 4 << 20)
            assert world.sum() == rounds and (b.sn[world] == np.arange(rounds)).all()
            assert ((size == 2) & (b.msg_bytes == 256 << 10)).sum() == rounds
            # GPU-timed: the plugin saw the kernel's stop about its execution time after its
            # start (the first call, with its connections' setup, apart)
            k = b.kstop_us[world] - b.kstart_us[world]
            assert (b.exec_us[world] > 0).all()
            assert np.median(np.abs(k - b.exec_us[world])) < 500


def test_the_healthy_job_gets_no_report():
    reports, stats = analyze_nccl(read_sources(inspector=[FIXTURES / "healthy"]))
    assert stats.ranks == 4 and stats.ops_read == 4 * 401
    assert reports == []


def test_the_slow_gpu_is_named():
    reports, _ = analyze_nccl(read_sources(inspector=[FIXTURES / "slow_rank2"]))
    assert [(r.kind, r.suspects[0].rank) for r in reports] == [("noncomm_slow", 2)]
    # it began at round 150 of 400 (calls of ~27 ms before, ~47 ms after)
    b = next(b for b in _records("slow_rank2") if b.procs[0][1] == 1206)
    world = np.flatnonzero(np.asarray([c.nranks for c in b.comms])[b.comm] == 4)
    ends = b.end_us[world][np.argsort(b.sn[world])] * 1000
    assert ends[140] <= reports[0].first_seen_ns <= ends[170]


def test_files_read_in_several_processes_give_the_same_rows(tmp_path):
    # what `c4 analyze --nccl-inspector DIR` does by default on a machine with several CPUs;
    # a truncated copy of one file shows that the workers' warnings come back too
    import gzip
    import shutil

    for f in find_inspector_files(FIXTURES / "healthy"):
        shutil.copy(f, tmp_path / f.name)
    cut = gzip.decompress((FIXTURES / "healthy" / "vm-pid709.log.gz").read_bytes())
    (tmp_path / "vm-pid709.log").write_bytes(cut[:-20])
    (tmp_path / "vm-pid709.log.gz").unlink()
    one, two = read_sources([tmp_path], workers=0), read_sources([tmp_path], workers=2)
    assert one.n_ops == two.n_ops == 4 * 401 - 1
    assert [b.source for b in one.ops] == [b.source for b in two.ops]
    for a, b in zip(one.ops, two.ops):
        assert (a.sn == b.sn).all() and (a.exec_us == b.exec_us).all() and a.comms == b.comms
    assert one.problems.counts == two.problems.counts and two.problems.counts["truncated_line"]
