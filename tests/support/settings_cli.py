"""Run a command derived from a settings dataclass (``c4.settings.derive_command``) through
typer for real and return the options it is called with."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import typer
from typer.testing import CliRunner

from c4.settings import derive_command


def parse_options(cls: type, args: list[str], env: dict[str, str] | None = None, *,
                  extra: Sequence[inspect.Parameter] = ()) -> dict[str, Any]:
    """The options a command derived from ``cls`` (plus ``extra`` parameters) receives from
    ``args`` and ``env``."""
    got: dict[str, Any] = {}

    def capture(**options: Any) -> None:
        got.update(options)

    app = typer.Typer()
    app.command()(derive_command(cls, capture, list(extra)))
    result = CliRunner().invoke(app, args, env=env or {}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return got
