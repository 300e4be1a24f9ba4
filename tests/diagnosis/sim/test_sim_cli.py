"""``c4 sim`` tells the user what a fault spec should look like instead of a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.settings import build
from diagnosis.sim.cli import OUTPUT
from diagnosis.sim.config import FaultSpec, SimConfig, SimError
from tests.support.settings_cli import parse_options


@pytest.mark.parametrize("spec, names", [
    ("slow_gpu:auto,slow=2.0@10-20", ["slow", "2.0@10-20", "KIND[:TARGET][@ONSET]"]),
    ("slow_gpu@ten", ["onset", "ten"]),
    ("slow_gpu,end=x", ["end", "'x'"]),
])
def test_bad_fault_spec_names_the_part_and_the_form(spec, names):
    with pytest.raises(SimError) as info:
        FaultSpec.parse(spec)
    for name in names:
        assert name in str(info.value)


def test_bad_fault_spec_on_the_command_line_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(build_app(), ["sim", "--out", str(tmp_path), "--gpus", "16",
                                           "--fault", "slow_gpu:auto,slow=2.0@10-20"])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "Traceback" not in res.output and "KIND[:TARGET][@ONSET]" in res.output


def test_fault_names_take_the_lab_spelling_too():
    assert FaultSpec.parse("slow-gpu:3@10,slow=2").kind == "slow_gpu"
    assert FaultSpec.parse("slow_link:auto@5") == FaultSpec.parse("slow-link:auto@5")


def _sim_config(args: list[str]) -> SimConfig:
    opts = parse_options(SimConfig, args, extra=OUTPUT)
    for p in OUTPUT:
        opts.pop(p.name)
    return build(SimConfig, opts, SimError)


def test_the_command_s_options_are_sim_config_s_fields():
    """No flag gives SimConfig's defaults (declared there only); 0 still means "none" for
    --sample, --nics-per-host and --uplink-gbps; faults are parsed."""
    assert _sim_config(["--out", "x"]) == SimConfig()
    cfg = _sim_config(["--out", "x", "--gpus", "64", "--sample", "8", "--nics-per-host", "4",
                       "--uplink-gbps", "100", "--no-paths", "--fault", "slow_gpu:3@10,slow=2",
                       "--fault", "dead_link:cable@5", "--hang-wait", "30"])
    assert cfg == SimConfig(gpus=64, sample=8, nics_per_host=4, uplink_gbps=100.0,
                            paths=False, hang_wait_s=30.0,
                            faults=(FaultSpec.parse("slow_gpu:3@10,slow=2"),
                                    FaultSpec.parse("dead_link:cable@5")))
    zero = _sim_config(["--out", "x", "--sample", "0", "--nics-per-host", "0",
                        "--uplink-gbps", "0"])
    assert (zero.sample, zero.nics_per_host, zero.uplink_gbps) == (None, None, None)
    assert _sim_config(["--out", "x", "--topology", "t.json"]).topology == "t.json"


def test_a_bad_job_names_its_flag():
    with pytest.raises(SimError, match="--tp 3 must divide --gpus-per-host 8"):
        _sim_config(["--out", "x", "--tp", "3"])


def test_a_negative_ras_run_ahead_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(build_app(), ["sim", "--out", str(tmp_path), "--gpus", "16",
                                           "--pp", "2", "--as", "ncclras",
                                           "--ras-run-ahead", "-2"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "--ras-run-ahead -2" in res.output
