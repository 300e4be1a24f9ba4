"""``c4 analyze --flight-recorder`` on the real fixture."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from c4.cli import build_app

FIXTURE = Path(__file__).parent / "fixtures" / "gloo_hang_4ranks"


def test_json_and_table_output() -> None:
    app = build_app()
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(FIXTURE / "pickle"),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.stdout)["reports"]
    assert report["kind"] == "noncomm_hang" and report["suspects"][0]["rank"] == 3
    res = CliRunner().invoke(app, ["analyze", "--flight-recorder", str(FIXTURE / "json")])
    assert res.exit_code == 0, res.output
    assert "noncomm_hang" in res.stdout


def test_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(build_app(), ["analyze", "--flight-recorder", str(tmp_path)])
    assert res.exit_code == 2 and "no Flight Recorder dumps" in res.output
