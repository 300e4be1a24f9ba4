"""``c4 probe`` as an operator runs it, on this machine's loopback addresses (real gloo ranks),
and its refusals for hosts it cannot reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _c4(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    # an empty lab directory: no lab is up, so names are addresses
    env = {**os.environ, "C4_LAB_DIR": str(tmp / "no-lab"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "c4", "probe", *args], capture_output=True,
                          text=True, timeout=120, cwd=str(REPO), env=env)


@pytest.mark.multiprocess
@pytest.mark.network
def test_pair_on_loopback_json(tmp_path):
    out = _c4("pair", "127.0.0.1", "127.0.0.2", "--bytes", str(1 << 20), "--iters", "3",
              "--format", "json", tmp=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    r = doc["result"]
    assert r["ok"] and r["hosts"] == ["127.0.0.1", "127.0.0.2"] and r["op"] == "sendrecv"
    assert r["backend"] == "gloo" and r["busbw_GBps"] > 0 and doc["expected_GBps"] is None


def test_unknown_hosts_and_backends_are_refused(tmp_path):
    out = _c4("pair", "10.1.2.3", "127.0.0.1", tmp=tmp_path)
    assert out.returncode == 2 and "--remote ssh" in out.stderr
    out = _c4("bisect", "127.0.0.1", "127.0.0.2", "--backend", "mpi", tmp=tmp_path)
    assert out.returncode == 2 and "--backend (C4_PROBE_BACKEND) must be one of gloo, " \
        "nccl-tests" in out.stderr
    out = _c4("confirm", "127.0.0.1", "127.0.0.2", "--backend", "nccl-tests",
              "--nccl-tests-dir", str(tmp_path), tmp=tmp_path)
    assert out.returncode == 2 and "sendrecv_perf is not in" in out.stderr
