"""The collector's parts without torch.distributed: row encoding, error classification, config,
the `c4 run` environment and the site hook (real subprocesses, no torch import)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from collector_testkit import REPO

from c4.proto import c4_pb2
from c4.proto.codec import decode_ops, encode_ops
from collectors.buffer import RecordBuffer, build_columns, error_key
from collectors.cli import run_environment
from collectors.completion import ERROR, OK, TIMEOUT, classify
from collectors.config import CollectorConfig
from collectors.errors import CollectorError, ConfigError


def test_rows_round_trip_through_the_wire_codec_with_error_texts():
    buf = RecordBuffer(capacity=16)
    pg, op, dt = (buf.strings.intern(s) for s in ("0", "all_reduce", "float32"))
    buf.append((pg, 0, op, 24, dt, 1_700_000_000_000_000_000, -1, 1_700_000_000_000_500_000,
                OK, -1))
    failed = (pg, 1, op, 24, dt, 1_700_000_000_001_000_000, -1, 1_700_000_000_002_000_000,
              ERROR, -1)
    buf.append(failed, "RuntimeError: boom")
    rows = buf.take(10)
    cols = build_columns(rows, rank=5, strings=buf.strings.snapshot(), errors=buf.errors)
    msg = c4_pb2.IngestRequest(ops=encode_ops("j", cols, attempt=1))
    back = decode_ops(c4_pb2.IngestRequest.FromString(msg.SerializeToString()).ops)
    assert back["rank"].tolist() == [5, 5]
    assert back["seq"].tolist() == [0, 1]
    assert list(back.names("op")) == ["all_reduce", "all_reduce"]
    assert back["t_end_ns"].tolist() == [rows[0][7], rows[1][7]]
    assert back["status"].tolist() == [OK, ERROR]
    assert back.error_text == {1: "RuntimeError: boom"}
    assert buf.errors[error_key(failed)]  # kept until the shipper has sent the batch
    assert buf.recorded == 2 and not buf.rows


def test_full_buffer_drops_and_counts_and_give_back_respects_capacity():
    buf = RecordBuffer(capacity=16)
    for i in range(20):
        buf.append((0, i, 0, 0, 0, i, -1, i, OK, -1))
    assert (len(buf.rows), buf.dropped_full, buf.recorded) == (16, 4, 20)
    taken = buf.take(4)
    for i in range(2):
        buf.append((0, 100 + i, 0, 0, 0, i, -1, i, OK, -1))
    assert buf.give_back(taken) == 2  # room for 2 of the 4
    assert [r[1] for r in buf.rows[:2]] == [0, 1]
    assert buf.recorded == 22


@pytest.mark.parametrize(("exc", "status"), [
    (RuntimeError("[../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 1000ms for "
                  "recv operation to complete"), TIMEOUT),
    (RuntimeError("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3)"), TIMEOUT),
    (RuntimeError("ProcessGroupGloo::broadcast: invalid root rank: 7"), ERROR),
    (ValueError("timeout must be positive"), ERROR),  # only RuntimeErrors are comm timeouts
])
def test_classify(exc, status):
    got, text = classify(exc)
    assert got == status
    assert text == f"{type(exc).__name__}: {exc}"


def test_config_from_environment_and_validation(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "elastic-job")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "3")
    monkeypatch.setenv("C4_SIDECAR_SOCKET", str(tmp_path / "s.sock"))
    monkeypatch.setenv("C4_HOST", "node012")
    monkeypatch.delenv("C4_JOB", raising=False)
    cfg = CollectorConfig()
    assert (cfg.job, cfg.attempt, cfg.host, cfg.socket_path) == (
        "elastic-job", 3, "node012", tmp_path / "s.sock")
    monkeypatch.setenv("C4_JOB", "mine")
    assert CollectorConfig().job == "mine"
    monkeypatch.setenv("C4_BUFFER_ROWS", "many")
    with pytest.raises(ConfigError, match="C4_BUFFER_ROWS"):
        CollectorConfig()
    monkeypatch.delenv("C4_BUFFER_ROWS")
    with pytest.raises(CollectorError, match="async_timing"):
        CollectorConfig(async_timing="sometimes")


def test_run_environment_puts_the_site_hook_first_once(tmp_path):
    from collectors.autoinstall import SITE_DIR

    env = run_environment({"PYTHONPATH": f"/opt/x{os.pathsep}{SITE_DIR}"}, job="j",
                          sidecar_socket=tmp_path / "s.sock")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/opt/x"]
    assert (env["C4_COLLECT"], env["C4_JOB"], env["C4_SIDECAR_SOCKET"]) == (
        "1", "j", str(tmp_path / "s.sock"))
    assert (SITE_DIR / "sitecustomize.py").is_file()


def _c4_run(args: list[str], env_extra: dict[str, str] | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    cmd = [sys.executable, "-c", "from c4.cli import main; main()", "run", *args]
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_c4_run_python_without_torch_never_imports_it():
    probe = ("import sys; from collectors.autoinstall import TorchDistributedWatcher as W; "
             "print(any(isinstance(f, W) for f in sys.meta_path), 'torch' in sys.modules, "
             "'numpy' in sys.modules)")
    assert _c4_run(["--", sys.executable, "-c", probe]).split() == ["True", "False", "False"]


def test_the_site_hook_runs_a_shadowed_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['SITE_OWN_HOOK'] = 'ran'\n")
    probe = "import os; print(os.environ.get('SITE_OWN_HOOK'))"
    out = _c4_run(["--", sys.executable, "-c", probe],
                  {"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"})
    assert out.strip() == "ran"


def test_the_cli_module_does_not_import_torch():
    code = "import sys, collectors.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert out.stdout.strip() == "False", out.stderr
