"""``c4 probe``'s settings declared once (``diagnosis.probes.settings``): the commands' options
come from their fields and from ``PlanConfig``'s; a measurement setting left out keeps its
backend's own default; a bad value is refused with the diagnosis package's error naming the
flag, and the backends' configs check their ranges the same way."""

from __future__ import annotations

import pytest

from c4.settings import build, option_specs
from diagnosis.errors import ConfigError, DiagnosisError
from diagnosis.probes.gloo import GlooConfig, GlooProber
from diagnosis.probes.nccl_runner import NcclTestsConfig, NcclTestsProber
from diagnosis.probes.plans import PlanConfig
from diagnosis.probes.settings import PlanProbeSettings, ProbeSettings
from tests.support.settings_cli import parse_options


def _settings(cls, args: list[str], env: dict[str, str] | None = None):
    return build(cls, parse_options(cls, args, env), ConfigError)


def test_left_out_measurements_keep_each_backend_s_defaults():
    gloo = _settings(ProbeSettings, []).prober()
    assert isinstance(gloo, GlooProber) and gloo.cfg == GlooConfig()
    nccl = _settings(ProbeSettings, ["--backend", "nccl-tests"]).prober()
    assert isinstance(nccl, NcclTestsProber) and nccl.cfg == NcclTestsConfig()


def test_flags_and_environment_reach_the_prober_and_the_plan():
    s = _settings(PlanProbeSettings, ["--backend", "nccl-tests", "--bytes", "1024", "--launcher",
                                      "srun", "--nccl-tests-dir", "/opt/nccl-tests/build",
                                      "--slow-ratio", "0.3"],
                  env={"C4_PROBE_ITERS": "7", "C4_PROBE_GPUS_PER_HOST": "8"})
    assert s.prober().cfg == NcclTestsConfig(launcher="srun", bin_dir="/opt/nccl-tests/build",
                                             size_bytes=1024, iters=7)
    assert s.gpus_per_host == 8 and s.plan == PlanConfig(slow_ratio=0.3)


@pytest.mark.parametrize("args,message", [
    (["--backend", "mpi"], "--backend (C4_PROBE_BACKEND) must be one of gloo, nccl-tests, "
                           "got 'mpi'"),
    (["--iters", "0"], "--iters (C4_PROBE_ITERS) must be at least 1, got 0"),
    (["--launcher", "pdsh"], "--launcher (C4_PROBE_LAUNCHER) must be one of mpirun, srun, "
                             "local"),
    (["--slow-ratio", "1.5"], "--slow-ratio (C4_PROBE_SLOW_RATIO) must be between 0 and 1, "
                              "got 1.5"),
])
def test_a_bad_value_names_its_flag(args, message):
    with pytest.raises(ConfigError) as err:
        _settings(PlanProbeSettings, args)
    assert message in str(err.value) and isinstance(err.value, DiagnosisError)


def test_backend_configs_built_in_code_are_checked_with_the_same_error():
    with pytest.raises(ConfigError, match="size_bytes must be at least 4, got 2"):
        GlooConfig(size_bytes=2)
    with pytest.raises(ConfigError, match="launcher must be one of mpirun, srun, local"):
        NcclTestsConfig(launcher="pdsh")
    with pytest.raises(ConfigError, match="efficiency must be in"):
        PlanConfig(efficiency=0)


def test_every_flag_is_documented_once():
    opts = list(option_specs(PlanProbeSettings))
    flags = [o.meta.flag for o in opts]
    assert len(set(flags)) == len(flags)
    assert all(o.meta.help.endswith(".") and o.meta.env.startswith("C4_") for o in opts)
