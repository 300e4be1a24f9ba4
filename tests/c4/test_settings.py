"""Settings declared once (``c4.settings``): the daemon's and the sidecar's options come from
their config dataclasses, parse flags and environment variables into the config, keep the
dataclass defaults, and a bad value is refused with the package's error naming the flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from c4.settings import build, format_duration, format_size, option_specs
from collectors.sidecar.cli import config_from_options as sidecar_config
from collectors.sidecar.cli import sidecar as sidecar_command
from collectors.sidecar.config import SidecarConfig
from collectors.sidecar.errors import SidecarConfigError
from diagnosis.daemon.config import DaemonConfig
from diagnosis.errors import ConfigError, DiagnosisError
from tests.support.settings_cli import parse_options

_parse = parse_options


def test_no_flags_give_the_dataclass_defaults():
    assert build(DaemonConfig, _parse(DaemonConfig, []), ConfigError) == \
        DaemonConfig()
    car = build(SidecarConfig, _parse(SidecarConfig, []), SidecarConfigError)
    assert car == SidecarConfig(socket_path=car.socket_path, spill_dir=car.spill_dir)
    assert car.edge.health is None and car.nccl is None and car.wal


def test_daemon_flags_and_environment_reach_nested_parts():
    opts = _parse(DaemonConfig, ["--job-idle", "2h", "--retention", "7d", "--job-memory", "1G",
                                 "--inspect-hosts", "b, a", "--no-detail", "--sample", "4",
                                 "--max-record-age", "90m"],
                  env={"C4_MAX_JOBS": "5", "C4_WORKERS": "64", "C4_MAX_STREAMS": "32"})
    config = build(DaemonConfig, opts, ConfigError)
    assert config.jobs.idle_s == 7200 and config.jobs.max_jobs == 5
    assert config.jobs.job_memory_bytes == 1 << 30 and config.retention_s == 7 * 86400
    assert config.inspect.local_hosts == frozenset({"a", "b"})
    assert not config.detail.enabled and config.budget.fixed_sample == 4
    assert config.workers == 64 and config.max_streams == 32
    assert config.bounds.max_age_s == 5400


def test_sidecar_flags_build_optional_parts_only_when_asked(tmp_path):
    from collectors.sidecar.cli import TOKEN_FILE

    assert {"--health/--no-health", "--health-interval", "--nccl-ras", "--no-wal"} <= \
        {o.meta.flag for o in option_specs(SidecarConfig)}    # the parts' flags too
    opts = _parse(SidecarConfig, ["--health", "--health-interval", "2", "--sysfs-root",
                                  str(tmp_path), "--gpu-map", "0000:db:00.0=n/gpu7",
                                  "--nic-map", "eth0=n/nic0", "--no-wal", "--wal-sync-ms",
                                  "250", "--socket-mode", "0600"], extra=[TOKEN_FILE])
    config = sidecar_config(dict(opts))
    health = config.edge.health
    assert health is not None and health.interval_s == 2
    assert health.sysfs_root == config.edge.sysfs_root == str(tmp_path)   # one --sysfs-root
    assert health.gpu_map and health.gpu_map[0][1] == "n/gpu7"
    assert config.edge.nic_map == (("eth0", "n/nic0"),)
    assert not config.wal and config.wal_sync_interval_s == 0.25 and config.socket_mode == 0o600
    assert config.nccl is None
    with pytest.raises(SidecarConfigError, match="--nccl-job is needed"):
        sidecar_config({**opts, "nccl_ras": ""})
    nccl = sidecar_config({**opts, "nccl_ras": "", "nccl_job": "j"}).nccl
    assert nccl is not None and nccl.ras == "" and nccl.job == "j"


@pytest.mark.parametrize("cls,error,args,message", [
    (DaemonConfig, ConfigError, ["--workers", "0"], "--workers (C4_WORKERS) must be at least 1"),
    (DaemonConfig, ConfigError, ["--job-idle", "soon"], "--job-idle (C4_JOB_IDLE): duration"),
    (DaemonConfig, ConfigError, ["--max-sample", "3"], "--max-sample (C4_MAX_SAMPLE) must be a "
                                                       "power of two, got 3"),
    (DaemonConfig, ConfigError, ["--window", "20"], "--window (20) must not exceed --max-window"),
    (DaemonConfig, ConfigError, ["--max-streams", "600"], "--max-streams (600) must be below"),
    (SidecarConfig, SidecarConfigError, ["--batch-records", "0"],
     "--batch-records (C4_BATCH_RECORDS) must be at least 1, got 0"),
    (SidecarConfig, SidecarConfigError, ["--ports", "some"], "--ports (C4_PORTS) must be one of"),
    (SidecarConfig, SidecarConfigError, ["--socket-mode", "rw"], "--socket-mode"),
])
def test_a_bad_value_names_its_flag(cls, error, args, message):
    with pytest.raises(error) as err:
        build(cls, _parse(cls, args), error)
    assert message in str(err.value)
    assert isinstance(err.value, DiagnosisError if cls is DaemonConfig else SidecarConfigError)


def test_every_flag_is_documented_once():
    for cls in (DaemonConfig, SidecarConfig):
        opts = list(option_specs(cls))
        flags = [o.meta.flag for o in opts]
        envs = [o.meta.env for o in opts]
        assert len(set(flags)) == len(flags), cls
        assert len(set(envs)) == len(envs), cls
        for o in opts:
            assert o.meta.env.startswith("C4_"), o.meta.flag
            assert o.meta.hidden or o.meta.help.endswith("."), o.meta.flag


def test_durations_and_sizes_read_back():
    for seconds in (0, 1, 90, 1800, 3600, 86400 * 30, 0.5):
        from c4.settings import parse_duration, parse_size

        assert parse_duration(format_duration(seconds)) == seconds
    for nbytes in (0, 1, 1023, 1 << 20, 4 << 30, 3 << 40):
        assert parse_size(format_size(nbytes)) == nbytes


def test_the_daemon_command_refuses_a_bad_flag_with_a_clear_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "c4", "daemon", "--workers", "0", "--store",
                          f"sqlite:///{tmp_path}/c4.db"], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 2
    assert "error: --workers (C4_WORKERS) must be at least 1, got 0" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_sidecar_command_keeps_the_token_off_the_command_line(tmp_path):
    app = typer.Typer()
    app.command()(sidecar_command)
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "--token-file" in result.output and "--token " not in result.output
    assert "[default: 0660]" in result.output and "--no-wal" not in result.output
