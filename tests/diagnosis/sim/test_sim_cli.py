"""``c4 sim`` tells the user what a fault spec should look like instead of a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from diagnosis.sim.config import FaultSpec, SimError


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
