"""Discovery on the node through an injected command runner that returns recorded outputs, and
a recorded sysfs tree: what is found, what a missing or broken tool leaves out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from c4.topology import discover as discover_mod
from c4.topology.discover import IBDEV2NETDEV, LLDPCTL, NVIDIA_SMI, discover_host
from c4.topology.host_internals import HostInternals
from c4.topology.importers.host import read_internals
from tests.support.topology_fixtures import topo_fixture


@pytest.fixture()
def sysfs(tmp_path: Path) -> Path:
    """A sysfs root whose class/infiniband is the recorded H100 node's (mlx5_0, mlx5_1 NDR IB,
    mlx5_bond_0 RoCE), with the GUID and netdev files the recording lacks added."""
    root = tmp_path / "sys"
    ib = root / "class" / "infiniband"
    shutil.copytree(topo_fixture("sysfs_class_infiniband_h100", folder="health"), ib)
    (ib / "mlx5_0" / "node_guid").write_text("e09d:7303:007a:4bd8\n")
    ndevs = ib / "mlx5_0" / "ports" / "1" / "gid_attrs" / "ndevs"
    ndevs.mkdir(parents=True)
    (ndevs / "0").write_text("ibp24s0\n")
    return root


def recorded(outputs: dict[tuple[str, ...], str | None]):
    calls: list[tuple[str, ...]] = []

    def run(argv):
        calls.append(tuple(argv))
        return outputs.get(tuple(argv))
    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_every_source(sysfs):
    run = recorded({
        NVIDIA_SMI: topo_fixture("nvidia_smi_topo_m_a800_8gpu_4nic_crlf.txt").read_text(),
        IBDEV2NETDEV: topo_fixture("ibdev2netdev_dgx_h100_12hca.txt").read_text(),
        LLDPCTL: topo_fixture("lldpctl_json_roce_host_arista.json").read_text(),
    })
    hi = discover_host(run, sysfs, hostname="n1")
    assert run.calls == [NVIDIA_SMI, IBDEV2NETDEV, LLDPCTL]
    assert hi.host == "n1" and len(hi.gpus) == 8 and hi.nvlink == "NV8"
    mlx0 = hi.nic("mlx5_0")
    assert (mlx0.gbps, mlx0.state, mlx0.link_layer, mlx0.netdev, mlx0.guid) == (
        400.0, "up", "InfiniBand", "ibp24s0", "e09d7303007a4bd8")
    bond = hi.nic("mlx5_bond_0")            # from sysfs alone
    assert (bond.gbps, bond.link_layer, bond.netdev) == (200.0, "Ethernet", None)
    # ibdev2netdev says mlx5_1 and mlx5_2 are down: no GPU on them
    assert {g.nic for g in hi.gpus} == {"mlx5_0", "mlx5_3"}
    # the LLDP interfaces that are no RDMA device are NICs of their own
    assert hi.nic("enp233s0").switch == "txdr-iah13a-r304-lab-prod-roce-leaf-21"
    assert "sysfs:" in hi.sources[-1] and hi.sources[0] == "nvidia-smi topo -m"


def test_missing_and_broken_tools_leave_the_rest(sysfs):
    def run(argv):
        if argv[0] == "lldpctl":
            raise PermissionError("lldpd socket")
        return "garbage\n" if argv[0] == "ibdev2netdev" else None
    hi = discover_host(run, sysfs, hostname="n2")
    text = [str(i) for i in hi.issues]
    assert "nvidia-smi topo -m: not available" in text
    assert "lldpctl -f json: not available" in text
    assert any(t.startswith("ibdev2netdev: unreadable output") for t in text)
    assert [n.name for n in hi.nics] == ["mlx5_0", "mlx5_1", "mlx5_bond_0"]
    assert hi.gpus == []


def test_nothing_at_all(tmp_path):
    hi = discover_host(lambda argv: None, tmp_path, hostname="bare")
    assert hi.gpus == [] and hi.nics == [] and hi.sources == []
    assert any("no RDMA devices" in str(i) for i in hi.issues)


def test_json_round_trip_and_import(sysfs, tmp_path):
    run = recorded({NVIDIA_SMI: topo_fixture(
        "nvidia_smi_topo_m_h800_8gpu_4nic_truncated_paste.txt").read_text()})
    hi = discover_host(run, sysfs, hostname="n3")
    doc = hi.to_json()
    assert HostInternals.from_json(json.loads(json.dumps(doc))) == hi
    f = tmp_path / "n3.json"
    f.write_text(json.dumps(doc))
    assert read_internals([(None, f)]) == [hi]


def test_cli_prints_the_json(sysfs, monkeypatch):
    from diagnosis.topology_cli import register
    monkeypatch.setattr(discover_mod, "run_command", lambda argv: None)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["topology", "discover", "--sysfs-root", str(sysfs),
                                   "--host", "n4"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["host"] == "n4" and doc["nics"][0]["name"] == "mlx5_0"


def test_cli_reads_saved_outputs(sysfs, tmp_path):
    from diagnosis.topology_cli import register
    from tests.support.topology_fixtures import recorded_outputs

    app = typer.Typer()
    register(app)
    folder = recorded_outputs(tmp_path / "outputs", lldpctl="lldpctl_json_roce_host_arista.json")
    res = CliRunner().invoke(app, ["topology", "discover", "--sysfs-root", str(sysfs),
                                   "--host", "n5", "--from", str(folder)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["sources"][:3] == ["nvidia-smi topo -m", "ibdev2netdev", "lldpctl -f json"]
    assert len(doc["gpus"]) == 8
    res = CliRunner().invoke(app, ["topology", "discover", "--from", str(tmp_path / "none")])
    assert res.exit_code == 2 and "is not a directory of recorded tool outputs" in res.output
