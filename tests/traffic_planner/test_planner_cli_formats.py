"""Flows and report files (errors name the field), the c4 plan CLI against shared specs
section 4, the modelled hash and pinned ports, job layouts and observed flows."""

from __future__ import annotations

import json
import zlib
from collections import defaultdict

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from c4.topology import Topology, link_id, rail_optimized
from traffic_planner.cli import register
from traffic_planner.errors import ConfigError, FlowFormatError, PlannerError
from traffic_planner.faults import down_from_reports
from traffic_planner.flows import Flow, check_flows, load_flows, save_flows
from traffic_planner.hashing import EcmpModel, crc32_np, mix32, mix32_np
from traffic_planner.layout import Parallelism, job_flows, observed_flows
from traffic_planner.problem import build_problem
from traffic_planner.solver import SolverConfig


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.mark.parametrize(("flows", "field"), [
    ([{"src": "node000/nic0", "gbps": 1}], "flows[0].dst"),
    ([{"src": "node000/nic0", "dst": "node001/nic0", "gbps": -1}], "flows[0].gbps"),
    ([{"src": "node000/nic0", "dst": "node001/nic0"}], "flows[0].gbps"),
    ([{"id": "a", "src": "node000/nic0", "dst": "node001/nic0", "gbps": 1},
      {"id": "a", "src": "node001/nic0", "dst": "node000/nic0", "gbps": 1}], "flows[1].id"),
    ([{"id": 7, "src": "node000/nic0", "dst": "node001/nic0", "gbps": 1}], "flows[0].id"),
    ("nope", "flows"),
])
def test_malformed_flows_name_the_field(tmp_path, flows, field) -> None:
    path = tmp_path / "flows.json"
    path.write_text(json.dumps({"flows": flows}))
    with pytest.raises(FlowFormatError) as info:
        load_flows(path)
    assert info.value.field == field and field in str(info.value)
    assert "flows.json" in str(info.value)


def test_flows_naming_unknown_nics() -> None:
    topo = rail_optimized(2, 1, hosts_per_leaf=2)
    with pytest.raises(FlowFormatError, match=r"flows\[1\]\.dst.*node009/nic0.*not in the"):
        check_flows([Flow("a", "node000/nic0", "node001/nic0", 1),
                     Flow("b", "node000/nic0", "node009/nic0", 1)], topo)
    with pytest.raises(FlowFormatError, match=r"flows\[0\]\.src.*a gpu, not a nic"):
        check_flows([Flow("a", "node000/gpu0", "node001/nic0", 1)], topo)


def test_flows_round_trip(tmp_path) -> None:
    flows = [Flow("dp.3:0>1", "node003/nic1", "node007/nic1", 200.0)]
    save_flows(flows, tmp_path / "f.json")
    assert load_flows(tmp_path / "f.json") == flows
    assert flows[0].group == "dp.3"


def _validate(plan: dict, topo: Topology, down: set[str]) -> float:
    """Check a plan against shared specs section 4; return the max load recomputed here."""
    assert set(plan) >= {"plan", "max_link_load", "ecmp_max_link_load", "lower_bound"}
    load: dict[tuple[str, str], float] = defaultdict(float)
    for item in plan["plan"]:
        path = item["path"]
        assert path[0] == item["src"] and path[-1] == item["dst"]
        assert len(set(path)) == len(path)
        for u, v in zip(path, path[1:]):  # noqa: RUF007
            assert topo.graph.has_edge(u, v), f"{u} and {v} are not linked"
            assert link_id(u, v) not in down
            load[(u, v)] += item["gbps"]
    return max(gb / topo.graph.edges[u, v]["gbps"] for (u, v), gb in load.items())


def test_flows_job_takes_its_layout_from_parallelism_s_fields(tmp_path, app) -> None:
    """--tp, --pp and --ep are Parallelism's fields (defaults declared there only); a bad one
    is refused with the planner's error naming the flag."""
    rail_optimized(4, 8, hosts_per_leaf=4, spines=2).save(tmp_path / "topo.json")
    runner = CliRunner()
    args = ["flows", "job", "-t", str(tmp_path / "topo.json"), "-n", "32", "--gbps", "100"]
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "cli.json")])
    assert res.exit_code == 0, res.output
    topo = Topology.load(tmp_path / "topo.json")
    assert load_flows(tmp_path / "cli.json") == job_flows(topo, 32, Parallelism(), gbps=100)
    res = runner.invoke(app, [*args, "--pp", "0", "-o", str(tmp_path / "bad.json")])
    assert res.exit_code == 2
    assert "error: --pp must be at least 1, got 0" in res.output
    with pytest.raises(ConfigError, match="--ep must be at least 1") as err:
        Parallelism(ep=0)
    assert isinstance(err.value, PlannerError)
    with pytest.raises(ConfigError, match="budget must be at least 1"):
        SolverConfig(budget=0)


def test_cli_json_follows_the_spec(tmp_path, app) -> None:
    topo = rail_optimized(32, 2, hosts_per_leaf=8, spines=8)
    topo.save(tmp_path / "topo.json")
    runner = CliRunner()
    res = runner.invoke(app, ["flows", "job", "-t", str(tmp_path / "topo.json"), "-n", "64",
                              "--tp", "2", "--shuffle", "3", "-o", str(tmp_path / "f.json")])
    assert res.exit_code == 0, res.output
    dead = "leaf00r1~spine03"
    res = runner.invoke(app, ["plan", "-t", str(tmp_path / "topo.json"), "--flows",
                              str(tmp_path / "f.json"), "--down", dead, "--format", "json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert len(plan["plan"]) == len(load_flows(tmp_path / "f.json")) == 64
    worst = _validate(plan, topo, {dead})
    assert plan["max_link_load"] == pytest.approx(worst, abs=1e-6)
    assert plan["lower_bound"] - 1e-6 <= plan["max_link_load"] <= plan["ecmp_max_link_load"]
    # Pinned source ports steer each flow, under the modelled hash, onto its planned path.
    problem = build_problem(topo, load_flows(tmp_path / "f.json"), {dead})
    choice = [problem.candidate_of(f, item["path"]) for f, item in enumerate(plan["plan"])]
    assert None not in choice
    sports = [item["udp_sport"] for item in plan["plan"]]
    assert EcmpModel(problem).place(sports) == choice

    # The table names the same figures; a re-plan from this plan after one more failure.
    (tmp_path / "plan.json").write_text(res.stdout)
    res = runner.invoke(app, ["plan", "-t", str(tmp_path / "topo.json"), "--flows",
                              str(tmp_path / "f.json"), "--down", dead, "--down",
                              "leaf01r0~spine00", "--previous", str(tmp_path / "plan.json")])
    assert res.exit_code == 0, res.output
    assert "flows moved from the previous plan" in res.output and "busbw" in res.output


def test_cli_no_path_and_bad_input(tmp_path, app) -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=2)
    topo.save(tmp_path / "topo.json")
    save_flows([Flow("pp.0:1>2", "node001/nic0", "node002/nic0", 100)], tmp_path / "f.json")
    runner = CliRunner()
    args = ["plan", "-t", str(tmp_path / "topo.json"), "--flows", str(tmp_path / "f.json")]
    res = runner.invoke(app, [*args, "--down", "node002/nic0"])
    assert res.exit_code == 2 and "pp.0:1>2" in res.output and "no path" in res.output
    res = runner.invoke(app, [*args, "--down", "leaf00r0~leaf01r0"])
    assert res.exit_code == 2 and "leaf00r0~leaf01r0" in res.output
    (tmp_path / "f.json").write_text('{"flows": [{"src": "node001/nic0", "gbps": 5}]}')
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "flows[0].dst" in res.output


def test_fault_reports_mark_links_down(tmp_path) -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=2)
    report = {"reports": [
        {"kind": "comm_slow", "first_seen_ns": 1, "summary": "slow link",
         "suspects": [{"type": "link", "id": "leaf00r0~spine01", "score": 0.9},
                      {"type": "switch", "id": "spine00", "score": 0.2},
                      {"type": "gpu", "id": "node000/gpu0", "score": 0.99}]},
        {"kind": "comm_hang", "first_seen_ns": 2, "summary": "nic dead",
         "suspects": [{"type": "nic", "id": "node003/nic0", "score": 0.7}]}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    down = down_from_reports(tmp_path / "r.json", topo, threshold=0.5)
    assert down == {"leaf00r0~spine01", "leaf01r0~node003/nic0", "node003/gpu0~node003/nic0"}
    assert "leaf00r0~spine00" in down_from_reports(tmp_path / "r.json", topo, threshold=0.1)
    report["reports"][0]["suspects"][0]["score"] = "high"
    (tmp_path / "r.json").write_text(json.dumps(report))
    with pytest.raises(FlowFormatError, match=r"reports\[0\]\.suspects\[0\]\.score"):
        down_from_reports(tmp_path / "r.json", topo)


def test_crc_matches_zlib() -> None:
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (64, 13), dtype=np.uint8)
    seeds = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    want = [zlib.crc32(bytes(row), int(s)) for row, s in zip(data, seeds, strict=True)]
    assert crc32_np(data, seeds).tolist() == want
    xs = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    assert mix32_np(xs).tolist() == [mix32(int(x)) for x in xs]


def test_layouts() -> None:
    groups = Parallelism(tp=2, pp=2, ep=2).groups(16)     # dp = 4
    assert groups["dp.0.1"] == ("ring", [1, 3, 5, 7])
    assert groups["pp.2.0"] == ("pipe", [4, 12])
    assert groups["ep.1.0.1"] == ("a2a", [12, 14])
    topo = rail_optimized(8, 2, hosts_per_leaf=4, spines=2)
    flows = job_flows(topo, 16, Parallelism(tp=2, pp=2, ep=2), gbps=100)
    ids = {f.id for f in flows}
    # tp=2 keeps each rank's data-parallel peers on other hosts, on the same rail.
    assert "dp.0.1:1>3" in ids and all(f.src.endswith("nic1") for f in flows
                                       if f.id.startswith("dp.0.1:"))
    assert {"pp.2.0:4>12", "pp.2.0:12>4", "ep.1.0.1:12>14"} <= ids
    a2a = next(f for f in flows if f.id == "ep.1.0.1:12>14")
    assert a2a.gbps == 100    # one peer: the whole rate


def test_observed_flows(tmp_path) -> None:
    topo = rail_optimized(2, 1, hosts_per_leaf=2, spines=1)
    lines = [{"type": "rank", "rank": 0, "host": "node000", "gpu": "node000/gpu0"},
             {"type": "rank", "rank": 1, "host": "node001", "nic": "node001/nic0"},
             {"type": "conn", "src": 0, "dst": 1, "bytes": 125_000_000, "t_start_ns": 0,
              "t_end_ns": 10_000_000, "pg": "dp"},
             {"type": "conn", "src": 0, "dst": 1, "bytes": 125_000_000,
              "t_start_ns": 10_000_000, "t_end_ns": 20_000_000, "pg": "dp"},
             {"type": "conn", "src": 1, "dst": 0, "bytes": 1000, "t_start_ns": 5}]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    flows = observed_flows(path, topo)
    assert [(f.id, f.src, f.dst) for f in flows] == [
        ("dp:0>1", "node000/nic0", "node001/nic0"), ("1>0", "node001/nic0", "node000/nic0")]
    assert flows[0].gbps == pytest.approx(100.0)    # 2 Gbit in 20 ms
    path.write_text(json.dumps({"type": "conn", "src": 0, "dst": 1, "t_start_ns": 0}) + "\n")
    with pytest.raises(FlowFormatError, match=r"trace\.jsonl:1 \(field 'bytes'\)"):
        observed_flows(path, topo)


def test_two_jobs_share_the_fabric(tmp_path, app) -> None:
    topo = rail_optimized(4, 1, hosts_per_leaf=2, spines=2, nic_gbps=100)
    topo.save(tmp_path / "topo.json")
    save_flows([Flow("a/dp:0>2", "node000/nic0", "node002/nic0", 100)], tmp_path / "a.json")
    save_flows([Flow("b/dp:1>3", "node001/nic0", "node003/nic0", 100)], tmp_path / "b.json")
    runner = CliRunner()
    args = ["plan", "-t", str(tmp_path / "topo.json"), "--format", "json"]
    res = runner.invoke(app, [*args, "--flows", str(tmp_path / "a.json"), "--flows",
                              str(tmp_path / "b.json")])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    # Planned together, the two jobs' flows take different spines.
    assert [item["id"] for item in plan["plan"]] == ["a/dp:0>2", "b/dp:1>3"]
    assert plan["plan"][0]["path"][2] != plan["plan"][1]["path"][2]
    assert plan["max_link_load"] == pytest.approx(1.0)
    res = runner.invoke(app, [*args, "--flows", str(tmp_path / "a.json"), "--flows",
                              str(tmp_path / "a.json")])
    assert res.exit_code == 2 and "appears twice" in res.output
