"""`c4 lab inject` takes a fault by the name `c4 sim --fault` gives it (slow_link) as well as
its own (slow-link); a name it does not know is refused with the list. No lab is started: the
name is judged before the lab is looked for."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from c4.cli import build_app


@pytest.mark.parametrize("name", ["slow-link", "slow_link", "slow_gpu", "cpu_contention"])
def test_both_spellings_are_one_fault(tmp_path, name):
    res = CliRunner().invoke(build_app(), ["lab", "inject", name, "a~b", "--lab-dir",
                                           str(tmp_path)])
    assert res.exit_code == 1 and "no lab is up" in res.output, res.output


def test_an_unknown_fault_is_refused_with_the_names_it_takes(tmp_path):
    res = CliRunner().invoke(build_app(), ["lab", "inject", "slow_lnk", "a~b", "--lab-dir",
                                           str(tmp_path)])
    assert res.exit_code == 1 and "unknown fault" in res.output and "slow-link" in res.output
