"""Launchers for other places are found by name in a registry the layer above fills, so that
recovery never imports the lab: ``c4 launch --lab DIR`` reaches the lab's launcher through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.lab.system import LabError
from recovery.errors import LaunchError
from recovery.launchers import LocalLauncher, make_launcher, register_launcher


def test_an_unregistered_launcher_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"no 'nowhere' launcher is registered.*`c4` command"):
        make_launcher("nowhere", tmp_path)


def test_a_registered_factory_gets_the_place(tmp_path: Path) -> None:
    seen: list[Path] = []

    def factory(where: Path) -> LocalLauncher:
        seen.append(where)
        return LocalLauncher()

    register_launcher("test-place", factory)
    assert isinstance(make_launcher("test-place", tmp_path), LocalLauncher)
    assert seen == [tmp_path]


def test_the_c4_command_registers_the_labs_launcher(tmp_path: Path) -> None:
    build_app()
    with pytest.raises(LabError, match="no lab is up"):
        make_launcher("lab", tmp_path)


def test_launch_on_a_lab_that_is_not_up_fails_with_the_labs_message(tmp_path: Path) -> None:
    res = CliRunner().invoke(build_app(), [
        "launch", "--job", "j", "--hosts", "a", "--lab", str(tmp_path / "lab"),
        "--workdir", str(tmp_path / "w"), "--journal", str(tmp_path / "j.db"),
        "--isolator", f"blocklist:{tmp_path / 'block'}", "--", "train.py"])
    assert res.exit_code == 2, res.output
    assert "no lab is up" in res.output
