"""``c4 export`` of a job whose rank stopped: the trace's end is when recording stopped, not
the hang's start, so ``c4 analyze`` of the export finds the hang."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto import c4_pb2
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.support.frames import group_info, op_batch, rank_info
from tests.support.services import free_port, wait_for

pytestmark = [pytest.mark.network]


def _req(seq: int, body: c4_pb2.IngestRequest) -> c4_pb2.IngestRequest:
    body.sidecar = "export-test"
    body.seq = seq
    return body


def test_export_of_a_hung_job_ends_when_recording_stopped(tmp_path):
    d = Daemon(DaemonConfig(listen=f"127.0.0.1:{free_port()}", store="memory://",
                            analyze_interval_s=0.2))
    d.start()
    try:
        addr = f"127.0.0.1:{d.port}"
        t0 = time.time_ns() - 30 * 10**9
        with DaemonClient(addr) as c:
            reqs = [rank_info("hung", 0, 2, "n0"), rank_info("hung", 1, 2, "n1"),
                    group_info("hung", "0", [0, 1]),
                    op_batch("hung", 0, range(200), t0=t0),
                    op_batch("hung", 1, range(200), t0=t0),
                    # rank 0 waits in call 200; rank 1 was stopped before it and never came
                    op_batch("hung", 0, range(200, 201), t0=t0, t_end=False)]
            for i, r in enumerate(reqs):
                c.send(_req(i + 1, r))
            wait_for(lambda: c.ops("hung").__len__() == 401, 10, what="the calls stored")
        trace = tmp_path / "hung.jsonl"
        res = CliRunner().invoke(build_app(), ["export", "hung", "-o", str(trace),
                                               "--daemon", addr])
        assert res.exit_code == 0, res.output
        end = json.loads(trace.read_text().splitlines()[-1])
        assert end["type"] == "end" and end["t_ns"] > t0 + 25 * 10**9
        res = CliRunner().invoke(build_app(), ["analyze", str(trace), "--format", "json",
                                               "--jobs", "0"])
        assert res.exit_code == 0, res.output
        reports = json.loads(res.stdout)["reports"]
        hangs = [r for r in reports if r["kind"] == "noncomm_hang"]
        assert hangs and hangs[0]["suspects"][0].get("rank") == 1, reports
        # --format json: what each file holds, as one object with typed numbers
        res = CliRunner().invoke(build_app(), [
            "export", "hung", "-o", str(tmp_path / "again.jsonl"), "--chrome-trace",
            str(tmp_path / "hung.json"), "--format", "json", "--daemon", addr])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["job"] == "hung" and doc["trace"]["path"] == str(tmp_path / "again.jsonl")
        assert doc["trace"]["lines"] == len(trace.read_text().splitlines())
        assert doc["trace"]["ops"] == 401 and doc["trace"]["insane"] == 0
        assert doc["chrome_trace"]["calls"] == 401 and doc["chrome_trace"]["ranks"] == 2
    finally:
        d.stop(grace=0.5)
