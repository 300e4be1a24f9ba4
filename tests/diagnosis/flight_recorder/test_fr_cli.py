"""``c4 fr-analyze`` on the real fixture."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from diagnosis.flight_recorder.cli import register

FIXTURE = Path(__file__).parent / "fixtures" / "gloo_hang_4ranks"


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def test_json_and_text_output() -> None:
    res = CliRunner().invoke(_app(), ["fr-analyze", str(FIXTURE / "pickle"), "--format", "json"])
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.stdout)["reports"]
    assert report["kind"] == "noncomm_hang" and report["suspects"][0]["rank"] == 3
    res = CliRunner().invoke(_app(), ["fr-analyze", str(FIXTURE / "json")])
    assert res.exit_code == 0 and "rank 3 never joined" in res.stdout


def test_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(_app(), ["fr-analyze", str(tmp_path)])
    assert res.exit_code == 2 and "no Flight Recorder dumps" in res.output
