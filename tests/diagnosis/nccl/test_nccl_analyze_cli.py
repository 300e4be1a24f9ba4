"""``c4 analyze`` on NCCL's own telemetry, as a user runs it: a simulated job written as the
Inspector and ncclras would have written it, with bad input mixed in (a line cut short, an
unknown format version, a last line without its newline): each warned about with its file and
line, every other record read, and the slow GPU found as c4's own trace finds it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests.diagnosis.nccl.support import simulated


def test_analyze_inspector_and_ras_with_bad_lines(tmp_path):
    src = simulated(str(tmp_path / "sim"), "slow_gpu:37@3,slow=3", gpus=64)
    job = tmp_path / "job"
    shutil.copytree(src, job)
    files = sorted((job / "nccl-inspector").iterdir())
    victim = files[3]
    lines = victim.read_bytes().split(b"\n")
    assert len(lines) > 40
    cut = lines[10][:70]                                   # a line cut short, then more lines
    future = lines[20].replace(b'"v4.0"', b'"v9.2"')       # a version this c4 does not know
    victim.write_bytes(b"\n".join([*lines[:10], cut, *lines[10:20], future, *lines[21:]])
                       + lines[5][:33])                    # the writer died mid-line
    out = subprocess.run(
        [sys.executable, "-m", "c4", "analyze", "--nccl-inspector", str(job / "nccl-inspector"),
         "--ncclras", str(job / "ncclras.json"), "--topology", str(job / "topology.json"),
         "--format", "json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    err = out.stderr
    assert f"{victim}:11: not a JSON object" in err
    assert f"{victim}:22: inspector_output_format_version 'v9.2'" in err
    n = len(lines)                        # lines + 2 inserted, the last one without newline
    assert f"{victim}:{n + 1}: the last line has no newline" in err
    truth_ops = sum(len(f.read_bytes().splitlines()) for f in src.joinpath(
        "nccl-inspector").iterdir())
    assert f"read {truth_ops:,} operations of 64 ranks" in err    # nothing else lost
    reports = json.loads(out.stdout)["reports"]
    assert [(r["kind"], [s["rank"] for s in r["suspects"]]) for r in reports] == [
        ("noncomm_slow", [37])]
