"""c4 topology import as a user runs it: counts and issues in words and JSON, a written file
that loads as a topology, errors with the file and line, layers merged with --merge."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from c4.topology import Topology
from diagnosis.topology_cli import register
from tests.support.topology_fixtures import topo_fixture


@pytest.fixture()
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def invoke(app, *args: str):
    return CliRunner().invoke(app, ["topology", *args])


def test_import_text(app, tmp_path):
    out = tmp_path / "t.json"
    res = invoke(app, "import", "slurm",
                 str(topo_fixture("slurm_topology_conf_tree_disconnected.conf")), "-o", str(out))
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"wrote {out}: 40 hosts, 0 GPUs, 40 NICs, 7 switches (5 leaf, "
                                 "2 spine), 44 links (44 cables)")
    assert "info: " in res.output and "3 separate trees" in res.output
    topo = Topology.load(out)
    assert len(topo.hosts()) == 40 and topo.graph.graph["sources"][0].startswith("slurm:")


def test_import_json_lists_the_issues(app, tmp_path):
    out = tmp_path / "t.json"
    res = invoke(app, "import", "ibnetdiscover",
                 str(topo_fixture("ibnetdiscover_manpage_example_rdma_core.txt")),
                 "-o", str(out), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["counts"]["switches"] == 2 and doc["warnings"] == 3
    assert doc["issues"][0]["level"] == "warning"
    lines = {i.get("line") for i in doc["issues"] if "disagree" in i["message"]}
    assert lines == {26, 52}
    saved = json.loads(out.read_text())["graph"]["import_issues"]
    assert len(saved) == len(doc["issues"])


def test_import_error_names_the_line(app, tmp_path):
    bad = topo_fixture("ibnetdiscover_partial_topograph_example_bad.out")
    res = invoke(app, "import", "ibnetdiscover", str(bad), "-o", str(tmp_path / "x.json"))
    assert res.exit_code == 2 and f"error: {bad}:10: partial output" in res.output
    assert not (tmp_path / "x.json").exists()
    res = invoke(app, "import", "nosuch", str(bad), "-o", str(tmp_path / "x.json"))
    assert res.exit_code == 2 and "unknown source 'nosuch'" in res.output


def test_fabric_then_hosts(app, tmp_path):
    fabric, merged = tmp_path / "fabric.json", tmp_path / "merged.json"
    assert invoke(app, "import", "slurm", str(topo_fixture(
        "slurm_topology_conf_tree_small.conf")), "-o", str(fabric)).exit_code == 0
    res = invoke(app, "import", "host",
                 f"peta10001={topo_fixture('nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt')}",
                 "--merge", str(fabric), "-o", str(merged))
    assert res.exit_code == 0, res.output
    topo = Topology.load(merged)
    assert topo.nic_of_gpu("peta10001/gpu7") == "peta10001/mlx5_2"
    assert "leaf100" in topo.graph.adj["peta10001/mlx5_2"]
    assert "peta10001/nic" not in topo.graph
