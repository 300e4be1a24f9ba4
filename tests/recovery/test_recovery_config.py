"""``c4 recover``'s settings declared once (``recovery.config``): its options come from the
policy's and the controller's fields, no flag gives the dataclass defaults, flags and
environment variables reach the config, and a bad value is refused with the recovery package's
error naming the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from c4.errors import C4Error
from c4.processes import REPO
from c4.settings import build, option_specs
from recovery.cli import RECOVER_EXTRA
from recovery.config import ControllerConfig, RecoverConfig
from recovery.errors import ConfigError, RecoveryError
from recovery.policy import Policy
from tests.support.settings_cli import parse_options


def _config(args: list[str], env: dict[str, str] | None = None) -> RecoverConfig:
    opts = parse_options(RecoverConfig, args, env, extra=RECOVER_EXTRA)
    for name in ("daemon", "journal", "isolator", "probe_lab"):
        opts.pop(name)
    return build(RecoverConfig, opts, ConfigError)


def test_no_flags_give_the_dataclass_defaults():
    assert _config([]) == RecoverConfig() == RecoverConfig(Policy(), ControllerConfig())


def test_flags_and_environment_reach_the_policy_and_the_controller():
    config = _config(["--kinds", "comm_hang, error", "--min-score", "0.7", "--dry-run",
                      "--isolate-on-cause", "xid:79,port_down", "--restart-timeout", "90"],
                     env={"C4_RECOVER_HANG_GRACE": "12", "C4_RECOVER_MAX_PER_HOUR": "9"})
    assert config.policy == Policy(kinds=("comm_hang", "error"), min_score=0.7, dry_run=True,
                                   isolate_on_causes=("xid:79", "port_down"),
                                   hang_grace_s=12.0, max_per_hour=9)
    assert config.controller == ControllerConfig(restart_timeout_s=90.0)


@pytest.mark.parametrize("args,message", [
    (["--kinds", "comm_hang,bogus"], "--kinds (C4_RECOVER_KINDS) names unknown fault kinds "
                                     "['bogus']"),
    (["--min-score", "1.5"], "--min-score (C4_RECOVER_MIN_SCORE) must be in [0, 1], got 1.5"),
    (["--max-node-fraction", "0"], "--max-node-fraction (C4_RECOVER_MAX_NODE_FRACTION) must "
                                   "be in (0, 1], got 0.0"),
    (["--max-per-job", "-1"], "--max-per-job (C4_RECOVER_MAX_PER_JOB) must not be negative"),
    (["--hang-grace", "-2"], "--hang-grace (C4_RECOVER_HANG_GRACE) must not be negative"),
    (["--restart-timeout", "0"], "--restart-timeout (C4_RECOVER_RESTART_TIMEOUT) must be "
                                 "positive, got 0.0"),
])
def test_a_bad_value_names_its_flag(args, message):
    with pytest.raises(ConfigError) as err:
        _config(args)
    assert message in str(err.value)
    assert isinstance(err.value, RecoveryError) and isinstance(err.value, C4Error)


def test_a_config_built_in_code_is_checked_the_same_way():
    with pytest.raises(ConfigError, match="--min-score"):
        Policy(min_score=-0.1)
    with pytest.raises(ConfigError, match="poll_s must be positive"):
        ControllerConfig(poll_s=0)


def test_every_flag_is_documented_once():
    opts = list(option_specs(RecoverConfig))
    flags = [o.meta.flag for o in opts] + [p.default.param_decls[0] for p in RECOVER_EXTRA]
    envs = [o.meta.env for o in opts]
    assert len(set(flags)) == len(flags) and len(set(envs)) == len(envs)
    for o in opts:
        assert o.meta.env.startswith("C4_RECOVER_") and o.meta.help.endswith("."), o.meta.flag


def test_the_recover_command_refuses_a_bad_flag_with_a_clear_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "c4", "recover", "--min-score", "2",
                          "--journal", str(tmp_path / "journal.db")], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--min-score (C4_RECOVER_MIN_SCORE) must be in [0, 1], got 2.0" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def _launch(args: list[str], env: dict[str, str] | None = None, **fields):
    from recovery.cli import LAUNCH_EXTRA
    from recovery.errors import LaunchError
    from recovery.supervisor import LaunchConfig

    opts = parse_options(LaunchConfig, args, env, extra=LAUNCH_EXTRA)
    command = opts.pop("command")
    for name in ("lab", "journal", "isolator"):
        opts.pop(name)
    return build(LaunchConfig, opts, LaunchError, {"command": tuple(command), **fields})


def test_launch_flags_keep_the_dataclass_defaults_and_reach_the_config():
    from recovery.supervisor import LaunchConfig

    bare = _launch(["--job", "j", "--hosts", "a,b", "--", "train.py", "--lr", "1"])
    assert bare == LaunchConfig(job="j", hosts=("a", "b"), command=("train.py", "--lr", "1"),
                                launcher=bare.launcher)
    full = _launch(["--job", "j", "--hosts", "a, b", "--spares", "s", "--min-hosts", "2",
                    "--sidecar-socket", "a=/x.sock,b=/y.sock", "--", "t.py"],
                   env={"C4_LAUNCH_GRACE": "3", "C4_LAUNCH_NPROC_PER_NODE": "4"})
    assert (full.hosts, full.spares, full.min_hosts, full.grace_s, full.nproc_per_node) == \
        (("a", "b"), ("s",), 2, 3.0, 4)
    assert full.sidecars == {"a": "/x.sock", "b": "/y.sock"}
    assert _launch(["--job", "j", "--hosts", "a", "--sidecar-socket", "/s.sock", "--",
                    "t.py"]).sidecars == {"*": "/s.sock"}


@pytest.mark.parametrize("args,message", [
    (["--nproc-per-node", "0"], "--nproc-per-node (C4_LAUNCH_NPROC_PER_NODE) must be at least "
                                "1, got 0"),
    (["--grace", "-1"], "--grace (C4_LAUNCH_GRACE) must not be negative, got -1.0"),
    (["--min-hosts", "3"], "--min-hosts (3) must be between 1 and the number of --hosts (2)"),
    (["--spares", "b"], "hosts and spares repeat a name"),
])
def test_a_bad_launch_value_names_its_flag(args, message):
    from recovery.errors import LaunchError

    with pytest.raises(LaunchError) as err:
        _launch(["--job", "j", "--hosts", "a,b", *args, "--", "t.py"])
    assert message in str(err.value)
