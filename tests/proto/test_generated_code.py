"""The checked-in generated code matches proto/c4.proto (regenerate with `make proto`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proto.generate import GENERATED, ROOT, generate


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (a dev dependency) regenerates code")
    generate(tmp_path)
    for rel in GENERATED:
        fresh = (tmp_path / rel).read_text()
        checked_in = (ROOT / rel).read_text()
        assert fresh == checked_in, f"{rel} is stale: run `make proto` and commit the result"
