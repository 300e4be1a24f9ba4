"""Every command that prints data takes --format table|json|jsonl with one shape: an object
naming what it holds, or one object per line; numbers as numbers."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from c4.cli import build_app
from recovery.isolation.blocklist import BlocklistIsolator


def run(*args: str) -> str:
    res = CliRunner().invoke(build_app(), list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_topology_show_formats(tmp_path):
    topo = tmp_path / "topo.json"
    run("topology", "gen", "rail", "--hosts", "4", "-o", str(topo))
    doc = json.loads(run("topology", "show", str(topo), "--format", "json"))
    counts = {r["what"]: r["count"] for r in doc["summary"] if r["what"] in ("hosts", "gpus")}
    assert counts == {"hosts": 4, "gpus": 32} and isinstance(doc["paths"], str)
    lines = [json.loads(x) for x in run("topology", "show", str(topo), "--format",
                                        "jsonl").splitlines()]
    assert lines == doc["summary"]
    assert "Gbit/s" in run("topology", "show", str(topo))


def test_nodes_list_formats(tmp_path):
    path = tmp_path / "blocklist.json"
    BlocklistIsolator(path).isolate("node7", "noncomm_hang: rank 3")
    spec = f"blocklist:{path}"
    doc = json.loads(run("nodes", "list", "--isolator", spec, "--format", "json"))
    assert doc == {"nodes": [{"node": "node7", "reason": "noncomm_hang: rank 3"}]}
    line = run("nodes", "list", "--isolator", spec, "--format", "jsonl").strip()
    assert json.loads(line) == doc["nodes"][0]
