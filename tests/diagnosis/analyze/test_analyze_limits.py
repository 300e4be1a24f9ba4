"""`c4 analyze` on hostile files (issue 16, items 4 and 9): an endless or huge line, deep
nesting and int64-extreme times each end in a one-line error naming the file and line, never
a traceback or an OverflowError; data stored before the daemon checked times exports to a
trace analyze reads."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto.codec import decode_ops
from c4.security.channel import ClientSecurity
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from diagnosis.store import OpRows, Write
from tests.support.frames import T0, group_info, op_batch, rank_info

INT64_MAX = np.iinfo(np.int64).max


class _Out:
    def __init__(self, result) -> None:
        self.returncode = result.exit_code
        self.stdout = result.stdout
        self.stderr = result.stderr
        self.exception = result.exception


def _c4(*args: str) -> _Out:
    """Run a c4 command in this process (as the command line would, exit code and all)."""
    return _Out(CliRunner().invoke(build_app(), list(args)))


def _analyze(*args: str) -> _Out:
    return _c4("analyze", *args)


def _one_error(out: _Out, where: str, says: str) -> None:
    assert out.returncode not in (0, None)
    assert out.exception is None or isinstance(out.exception, SystemExit), out.exception
    assert "Traceback" not in out.stderr and "Error:" not in out.stderr, out.stderr[-2000:]
    assert where in out.stderr and says in out.stderr, out.stderr[-2000:]
    assert len(out.stderr) < 2000


def _trace(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


HEAD = [{"type": "meta", "version": 2, "job": "j"}, {"type": "rank", "rank": 0, "host": "h0"},
        {"type": "group", "pg": "0", "ranks": [0]}]


def _op(seq: int, t: int) -> dict:
    return {"type": "op", "rank": 0, "pg": "0", "seq": seq, "op": "all_reduce", "bytes": 4096,
            "t_enter_ns": t, "t_end_ns": t + 1000}


def test_a_line_too_long_and_an_endless_one(tmp_path):
    long = tmp_path / "long.jsonl"
    with long.open("w") as fh:
        fh.write(json.dumps(HEAD[0]) + "\n")
        fh.write('{"type": "rank", "rank": 0, "host": "' + "h" * (17 << 20) + '"}\n')
    _one_error(_analyze(str(long)), f"{long}:2", "line longer than 16 MiB")
    t0 = time.process_time()
    _one_error(_analyze("/dev/zero"), "/dev/zero:1", "line longer than 16 MiB")
    assert time.process_time() - t0 < 5


def test_deep_nesting_in_a_trace_and_a_topology(tmp_path):
    trace = tmp_path / "nested.jsonl"
    trace.write_text(json.dumps(HEAD[0]) + "\n" + '{"type": "rank", "rank": 0, "host": '
                     + "[" * 100_000 + "]" * 100_000 + "}\n")
    _one_error(_analyze(str(trace)), f"{trace}:2", "not valid JSON")
    topo = tmp_path / "topo.json"
    topo.write_text('{"nodes":\n' + "[" * 100_000 + "]" * 100_000 + "}")
    good = _trace(tmp_path / "good.jsonl", [*HEAD, _op(0, T0)])
    _one_error(_analyze(str(good), "--topology", str(topo)), f"{topo}:2", "nested too deeply")


def test_int64_extreme_times_are_a_clear_error(tmp_path):
    trace = _trace(tmp_path / "poison.jsonl",
                   [*HEAD, _op(0, T0), {**_op(1, INT64_MAX - 5), "t_end_ns": INT64_MAX}])
    _one_error(_analyze(str(trace)), f"{trace}:5 (field 't_enter_ns')", "from 0 to 2**62")
    conn = _trace(tmp_path / "conn.jsonl", [*HEAD, _op(0, T0), {
        "type": "conn", "src": 0, "dst": 0, "bytes": 1, "t_start_ns": -(1 << 63)}])
    _one_error(_analyze(str(conn)), f"{conn}:5 (field 't_start_ns')", "from 0 to 2**62")


@pytest.mark.network
def test_poison_stored_before_the_door_checked_exports_to_a_trace_analyze_reads(tmp_path):
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://",
                            max_requests_per_second=0))
    d.start()
    c = DaemonClient(f"127.0.0.1:{d.port}", timeout=10.0, security=ClientSecurity())
    try:
        for seq, req in enumerate([rank_info("old", 0, 1, "n0"), group_info("old", "0", [0]),
                                   op_batch("old", 0, range(20))], 1):
            req.sidecar, req.seq = "s", seq
            assert not c.send(req).code
        # what an older daemon let through: int64-extreme times, written to the store as is
        cols = decode_ops(op_batch("old", 0, range(20, 28)).ops)
        cols = type(cols)({k: v.copy() for k, v in cols.columns.items()}, cols.strings)
        cols.columns["t_enter_ns"][::2] = -INT64_MAX - 1
        cols.columns["t_end_ns"][:] = INT64_MAX
        d.store.write([Write("s", 99, OpRows("old", 0, cols))])
        trace = tmp_path / "old.jsonl"
        out = _c4("export", "old", "-o", str(trace), "--daemon", f"127.0.0.1:{d.port}")
        assert out.returncode == 0, out.stderr
        assert "left out 8 records" in out.stdout
        out = _analyze(str(trace), "--format", "json")
        assert out.returncode == 0, out.stderr[-2000:]
        assert "OverflowError" not in out.stderr
    finally:
        c.close()
        d.stop(grace=1)
