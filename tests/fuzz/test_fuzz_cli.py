"""The CLI on fuzzed files: `c4 analyze`, `c4 topology show` and `c4 report --html --trace` end
with a result (exit 0) or a message and exit 2, never with a traceback."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from c4.cli import build_app
from c4.topology.builders import rail_optimized
from tests.fuzz.fuzzkit import fuzz, mutate
from tests.fuzz.test_fuzz_trace import SEED as TRACE

TOPO = json.dumps(rail_optimized(2, 2).to_json()).encode()


def _run(args_for, raw: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"input{suffix}"
        path.write_bytes(raw)
        res = CliRunner().invoke(build_app(), args_for(path, Path(d)))
    assert res.exit_code in (0, 2), f"exit {res.exit_code}: {res.output[-1500:]}"
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


@fuzz(20)
@given(st.data())
def test_analyze_mutated_trace(data):
    _run(lambda p, _d: ["analyze", str(p), "--format", "json", "--jobs", "0"],
         mutate(TRACE, data.draw), ".jsonl")


@fuzz(20)
@given(st.data())
def test_topology_show_mutated(data):
    _run(lambda p, _d: ["topology", "show", str(p)], mutate(TOPO, data.draw), ".json")


@fuzz(8)
@given(st.data())
def test_report_html_mutated_trace(data):
    _run(lambda p, d: ["report", "--html", str(d / "r.html"), "--trace", str(p)],
         mutate(TRACE, data.draw), ".jsonl")
