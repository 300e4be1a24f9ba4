"""Real gloo jobs with a planted fault: the dumps they leave must name the planted rank."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diagnosis.flight_recorder import analyze_dumps, load_dumps

JOB = Path(__file__).parent / "fr_job.py"

pytestmark = pytest.mark.multiprocess


def _run(out: Path, *args: str) -> None:
    proc = subprocess.run([sys.executable, str(JOB), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_rank_that_never_joins_is_named(tmp_path: Path) -> None:
    _run(tmp_path, "--scenario", "hang", "--stacks-only-rank", "0")
    for enc in ("pickle", "json"):
        dumps = load_dumps(tmp_path / enc)
        assert {d.version.split(".")[0] for d in dumps} == {"2"}
        (hang,) = analyze_dumps(tmp_path / enc)
        assert hang.kind == "noncomm_hang"
        assert hang.top.rank == 3 and hang.top.score > 0.8, hang.summary
        assert [s.rank for s in hang.suspects] == [3, 2]
    # pickles carry the Python stack of every call (and stay loadable with it); only rank 0's
    # has them: a process's first dump with stacks symbolizes for seconds
    assert b"frames" in (tmp_path / "pickle" / "nccl_trace_rank_0").read_bytes()
    assert b"frames" not in (tmp_path / "pickle" / "nccl_trace_rank_1").read_bytes()


def test_mismatched_collective_names_rank_0_not_the_others(tmp_path: Path) -> None:
    # rank 0 is the rank a reference-rank analyzer compares everyone against. Without stacks:
    # the first dump with them symbolizes for seconds per rank, and the hang test checks them
    _run(tmp_path, "--scenario", "mismatch", "--culprit", "0", "--no-stacks")
    for enc in ("pickle", "json"):
        reports = analyze_dumps(tmp_path / enc)
        (err,) = [r for r in reports if r.kind == "error"]
        assert [s.rank for s in err.suspects] == [0], err.summary
        assert err.evidence["majority"].startswith("all_reduce")
        assert "all_gather" in err.summary
