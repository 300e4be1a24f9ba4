"""Discovery on the node, end to end: real ``c4 sidecar`` processes discover their host from
recorded tool outputs (``--discover DIR``, the runner path the live tools take) and ship it over
gRPC to a real daemon, which assembles the job's topology with its Slurm fabric, places the
ranks on GPUs and NICs, localizes on it, answers ``c4 topology show --job``, follows a change
on a host, and still knows the hosts after a restart."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto import c4_pb2
from c4.topology.importers.slurm_conf import import_slurm_conf
from c4.topology.model import Topology
from collectors.sidecar.discovery import HostDiscovery, make_runner
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from tests.collectors.sidecar.harness import Car
from tests.support.frames import RankConnection, group_info
from tests.support.services import wait_for
from tests.support.topology_fixtures import recorded_outputs, topo_fixture

HOSTS = ("peta10000", "peta10020")


def rank_info(rank: int, host: str, device: str, world: int = 4) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(
        job="j", rank=rank, world_size=world, host=host, local_rank=rank % 2, backend="nccl",
        cuda_device=device))


def places(client: DaemonClient) -> dict[int, tuple[str | None, str | None, str]]:
    obj = client.job_topology("j")
    return {r["rank"]: (r["gpu"], r["nic"], r["from"]) for r in obj["ranks"]}


def test_sidecars_discover_and_the_daemon_places_ranks(tmp_path):
    fabric = tmp_path / "fabric.json"
    Topology(import_slurm_conf(topo_fixture("slurm_topology_conf_tree_small.conf")).graph
             ).save(fabric)
    store = f"sqlite:///{tmp_path / 'c4.db'}"
    daemon = Daemon(DaemonConfig(listen="127.0.0.1:0", store=store, analyze_interval_s=0.2),
                    topology=Topology.load(fabric), topology_source="fabric.json")
    daemon.start()
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    outputs = {h: recorded_outputs(tmp_path / f"outputs-{h}") for h in HOSTS}
    cars = [Car(tmp_path, daemon.port, host=h, name=h,
                extra=["--discover", str(outputs[h]), "--discover-interval", "0.5",
                       "--sysfs-root", str(sysfs), "--ports", "off"]).start() for h in HOSTS]
    conns = [RankConnection(car.sock) for car in cars]
    address = f"127.0.0.1:{daemon.port}"
    try:
        # CUDA_VISIBLE_DEVICES=1,7 on each host: local ranks 0 and 1 drive GPUs 1 and 7
        for i, (host, conn) in enumerate(zip(HOSTS, conns)):
            conn.send(rank_info(2 * i, host, "1"), rank_info(2 * i + 1, host, "7"),
                      group_info("j", "0", [0, 1, 2, 3]))
        with DaemonClient(address) as client:
            want = {0: ("peta10000/gpu1", "peta10000/mlx5_0", "discovered"),
                    1: ("peta10000/gpu7", "peta10000/mlx5_3", "discovered"),
                    2: ("peta10020/gpu1", "peta10020/mlx5_0", "discovered"),
                    3: ("peta10020/gpu7", "peta10020/mlx5_3", "discovered")}
            wait_for(lambda: places(client) == want, 30, what="every rank placed by discovery")
            obj = client.job_topology("j", with_graph=True)
            assert obj["discovered"] == list(HOSTS) and obj["fabric"] == "fabric.json"
            assert obj["counts"]["gpus"] == 16
            links = {(lk["source"], lk["target"]) for lk in obj["topology"]["links"]}
            assert ("peta10000/mlx5_0", "leaf100") in links or \
                ("leaf100", "peta10000/mlx5_0") in links
            # the detectors place and localize on the same assembled topology
            engine = daemon.live._jobs[("j", 0)].engine
            assert engine.placement.get(2).nic == "peta10020/mlx5_0"
            must = engine.localizer.pair(0, 2)[1]
            assert {c.id for c in must if c.type == "switch"} == {"leaf100", "grp10", "leaf101"}
            assert {c.id for c in must if c.type == "nic"} == {"peta10000/mlx5_0",
                                                                "peta10020/mlx5_0"}

            # c4 topology show --job, text and JSON
            runner = CliRunner()
            res = runner.invoke(build_app(), ["topology", "show", "--job", "j", "--daemon",
                                              address])
            assert res.exit_code == 0, res.output
            lines = res.output.splitlines()
            assert lines[0] == "job j: 2 hosts, 2 discovered; fabric: fabric.json"
            assert "ranks: 4 (4 discovered)" in lines
            assert ["1", "peta10000", "peta10000/gpu7", "peta10000/mlx5_3", "discovered"] in \
                [line.split() for line in lines]
            res = runner.invoke(build_app(), ["topology", "show", "--job", "j", "--daemon",
                                              address, "--format", "json"])
            assert res.exit_code == 0 and json.loads(res.output)["undiscovered"] == []
            res = runner.invoke(build_app(), ["topology", "show", "--job", "nope", "--daemon",
                                              address])
            assert res.exit_code == 2 and "job 'nope' has no registered rank" in res.output

            # on change: peta10000's mlx5_0 goes down; its sidecar notices and says so. The
            # running ranks keep the NIC NCCL picked when they started; a rank that starts
            # now gets the NIC its GPU is paired with now.
            ibdev = outputs["peta10000"] / "ibdev2netdev.txt"
            fresh = ibdev.with_suffix(".new")       # replaced at once: no round reads half
            fresh.write_text(ibdev.read_text().replace("ibp24s0 (Up)", "ibp24s0 (Down)"))
            fresh.replace(ibdev)

            def mlx5_0_down() -> bool:
                obj = client.job_topology("j", with_graph=True)
                node = next(n for n in obj["topology"]["nodes"]
                            if n["id"] == "peta10000/mlx5_0")
                return node.get("state") == "down"
            wait_for(mlx5_0_down, 30, what="the daemon hearing that mlx5_0 went down")
            obj = client.job_topology("j")
            assert "rank 0 keeps NIC peta10000/mlx5_0, the one its GPU used when it started " \
                "(peta10000 now pairs peta10000/gpu1 with peta10000/mlx5_3)" in \
                [i["message"] for i in obj["issues"]]
            assert places(client) == want and engine.placement.get(0).nic == "peta10000/mlx5_0"
            conns[0].send(rank_info(4, "peta10000", "1", world=8))
            wait_for(lambda: places(client).get(4) == ("peta10000/gpu1", "peta10000/mlx5_3",
                                                       "discovered"), 30,
                     what="a rank started after the change paired with an up NIC")
            wait_for(lambda: engine.placement.get(4).nic == "peta10000/mlx5_3", 10,
                     what="the engine placing the new rank")
        # (a round every 0.5 s; a loaded machine may have run only one on a car that had
        # nothing to change)
        wait_for(lambda: all(car.metric("c4_sidecar_discovery_rounds_total") >= 2
                             for car in cars), 30, what="two discovery rounds on every sidecar")
        for car in cars:
            assert car.metric("c4_sidecar_rejected_requests_total") == 0
        assert cars[0].metric("c4_sidecar_discovery_sent_total") == 2   # start, mlx5_0 down
        assert cars[1].metric("c4_sidecar_discovery_sent_total") == 1
    finally:
        for conn in conns:
            conn.close()
        for car in cars:
            car.stop()
        daemon.stop(grace=1)
    # a restarted daemon keeps the hosts' internals in its store
    again = Daemon(DaemonConfig(listen="127.0.0.1:0", store=store),
                   topology=Topology.load(fabric), topology_source="fabric.json")
    again.start()
    try:
        with DaemonClient(f"127.0.0.1:{again.port}") as client:
            got = places(client)
            # assembled afresh from the stored registrations and internals (what each rank
            # started with is not kept)
            assert got[4] == ("peta10000/gpu1", "peta10000/mlx5_3", "discovered")
            assert got[2] == ("peta10020/gpu1", "peta10020/mlx5_0", "discovered")
    finally:
        again.stop(grace=1)


def test_discovery_ships_only_what_changed(tmp_path):
    outputs = recorded_outputs(tmp_path / "outputs", lldpctl="lldpctl_json_roce_host_arista.json")
    sent: list[c4_pb2.HostTopology] = []
    disc = HostDiscovery("n1", lambda **body: sent.append(body["host_topology"]),
                         make_runner(str(outputs), 5.0), sysfs_root=str(tmp_path / "nosys"))
    assert disc.discover_once() and not disc.discover_once()
    assert len(sent) == 1 and sent[0].host == "n1" and disc.rounds == 2
    internals = json.loads(sent[0].internals)
    assert internals["host"] == "n1" and len(internals["gpus"]) == 8
    assert "lldpctl -f json" in internals["sources"]
    (outputs / "lldpctl.json").unlink()           # lldpd stopped: the host changed
    assert disc.discover_once() and len(sent) == 2
    assert sent[1].digest != sent[0].digest
    assert "lldpctl -f json" not in json.loads(sent[1].internals)["sources"]
    assert make_runner("off", 1.0) is None


def test_a_missing_recorded_directory_is_a_clear_error(tmp_path):
    from c4.topology import TopologyError

    with pytest.raises(TopologyError, match="is not a directory of recorded tool outputs"):
        make_runner(str(tmp_path / "absent"), 1.0)


def test_discovered_nics_map_the_ports_the_sidecar_reads(tmp_path):
    """The recorded H100 node's sysfs: its ports are read under the ids the daemon's
    topology gives its NICs, with no --nic-map; an explicit map still wins."""
    import shutil

    from c4.topology.discover import discover_host, recorded_runner
    from collectors.sidecar.discovery import port_map
    from collectors.sidecar.edge import Edge
    from collectors.sidecar.edge_config import EdgeConfig

    sysfs = tmp_path / "sys"
    shutil.copytree(topo_fixture("sysfs_class_infiniband_h100", folder="health"),
                    sysfs / "class" / "infiniband")
    outputs = recorded_outputs(tmp_path / "outputs")
    hi = discover_host(recorded_runner(outputs), sysfs, hostname="n1")
    mapping = port_map(hi)
    assert mapping["mlx5_0/1"] == "n1/mlx5_0" and mapping["ibp24s0"] == "n1/mlx5_0"
    assert mapping["mlx5_bond_0/1"] == "n1/mlx5_bond_0"

    def edge(nic_map=(), ports="mapped") -> Edge:
        return Edge("n1", EdgeConfig(ports=ports, sysfs_root=str(sysfs), nic_map=nic_map),
                    lambda **_: None, lambda *_: None, lambda *_: None)
    plain = edge()
    assert plain.ports is None                      # nothing mapped yet: nothing read
    plain.map_ports(mapping)
    assert sorted(plain.ports.read()) == ["n1/mlx5_0", "n1/mlx5_1", "n1/mlx5_bond_0"]
    pinned = edge(nic_map=(("mlx5_0/1", "n1/rail0"),))
    pinned.map_ports(mapping)
    assert sorted(pinned.ports.read()) == ["n1/mlx5_1", "n1/mlx5_bond_0", "n1/rail0"]
    off = edge(ports="off")
    off.map_ports(mapping)
    assert off.ports is None
