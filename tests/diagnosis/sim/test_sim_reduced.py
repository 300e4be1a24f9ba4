"""``c4 sim --sample K``: the version 2 trace the edge would ship, checked against the full trace
of the same run (same seed), and the default output unchanged."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import numpy as np
import pytest
from simtrace_helpers import read, run

from c4.proto.sampling import is_sampled
from c4.topology import Topology
from diagnosis.sim import FaultSpec, SimConfig, SimError, simulate

W_MS = 200
W = W_MS * 1_000_000
SKEW_NS = 200_000
KW = {"gpus": 64, "iterations": 6, "microbatches": 2, "seed": 5, "hosts_per_leaf": 2,
      "faults": (FaultSpec.parse("dead_link:cable@4"),)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The same run written in full (version 1) and reduced at K = 8."""
    full = run(tmp_path_factory.mktemp("full"), **KW)
    red = run(tmp_path_factory.mktemp("reduced"), sample=8, window_ms=W_MS, **KW)
    return full, red


def _lines(path, kind: str) -> list[str]:
    tag = f'"type":"{kind}"'
    return [ln for ln in path.read_text().splitlines() if tag in ln]


def test_meta_says_version_2_and_the_factor_and_there_are_no_conn_records(pair):
    full, red = pair
    assert red.meta == {"type": "meta", "version": 2, "job": "sim", "sample": 8}
    assert full.meta["version"] == 1 and full.conns and not red.conns
    assert red.progress and red.linkstats and red.ports
    assert red.truth["reduced"] == {"sample": 8, "window_ns": W}
    assert red.truth["records"] == {"op": len(red.ops), "conn": 0,
                                    "progress": len(red.progress),
                                    "linkstat": len(red.linkstats), "port": len(red.ports)}
    assert red.truth["iteration_start_ns"] == full.truth["iteration_start_ns"]


def test_op_lines_are_the_full_traces_sampled_calls_and_errors(pair):
    full, red = pair
    want = [ln for ln, o in zip(_lines(full.dir / "trace.jsonl", "op"), full.ops)
            if is_sampled(o["pg"], o["seq"], 8) or o.get("status", "ok") != "ok"]
    got = _lines(red.dir / "trace.jsonl", "op")
    assert got == want and 0 < len(got) < len(full.ops) / 4


def _direction(op: str) -> str | None:
    return "send" if op.endswith("send") else "recv" if op.endswith("recv") else None


def test_progress_equals_a_recomputation_from_every_call(pair):
    full, red = pair
    end = full.end_ns
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for o in full.ops:
        d = _direction(o["op"])
        by_key[o["rank"], o["pg"], d, o["peer"] if d else None].append(o)
    want = set()
    for (rank, pg, d, peer), rows in by_key.items():
        enter = np.array([o["t_enter_ns"] for o in rows])
        done = np.array([o.get("t_end_ns", -1) if o.get("status", "ok") == "ok" else -1
                         for o in rows])
        seq = np.array([o["seq"] for o in rows])
        prev = (-1, -1)
        for w in range(int(enter.min()) // W, end // W + 1):
            t = min((w + 1) * W, end)
            ent = int(seq[enter < t].max(initial=-1))
            com = int(seq[(done >= 0) & (done < t)].max(initial=-1))
            if (ent, com) != prev:
                want.add((rank, pg, d, peer, t, ent, com))
            prev = (ent, com)
    got = {(p["rank"], p["pg"], p.get("op"), p.get("peer"), p["t_ns"], p["entered"],
            p.get("completed", -1)) for p in red.progress}
    assert len(got) == len(red.progress) and got == want


def test_linkstat_equals_a_recomputation_from_every_transfer(pair):
    full, red = pair
    end = full.end_ns
    by_conn: dict[tuple, list[dict]] = defaultdict(list)
    for c in full.conns:
        by_conn[c["src"], c["dst"], c["pg"]].append(c)
    want = {}
    for key, rows in by_conn.items():
        start = np.array([c["t_start_ns"] for c in rows])
        stop = np.array([c.get("t_end_ns", -1) for c in rows])
        size = np.array([c["bytes"] for c in rows])
        for w in range(int(start.min()) // W, end // W + 1):
            lo, t = w * W, min((w + 1) * W, end)
            done = (stop >= lo) & (stop < t)
            live = (start < t) & ((stop < 0) | (stop >= t))
            if done.any() or live.any():
                dur = (stop - start)[done]
                want[(*key, t)] = (t - lo, int(done.sum()), int(size[done].sum()),
                                   int(dur.sum()), int(dur.max(initial=0)), int(live.sum()),
                                   int(start[live].min()) if live.any() else None,
                                   tuple(rows[0]["path"]))
    got = {(s["src"], s["dst"], s["pg"], s["t_ns"]):
           (s["window_ns"], s["transfers"], s["bytes"], s["busy_ns"], s["max_ns"], s["open"],
            s.get("open_since_ns"), tuple(s["path"])) for s in red.linkstats}
    assert len(got) == len(red.linkstats) and got == want
    # the dead cable's stuck transfer is open in every window until recording stopped
    stuck = [s for s in red.linkstats if s["open"] and s["t_ns"] > full.end_ns - 10 * W]
    assert stuck and all(full.truth["faults"][0]["component"]["id"].split("~")[0]
                         in s["path"] or full.truth["faults"][0]["component"]["id"]
                         .split("~")[1] in s["path"] for s in stuck)


def test_ports_start_up_and_the_dead_cable_takes_its_nic_down_when_it_dies(pair):
    _, red = pair
    topo = Topology.load(red.dir / "topology.json")
    t0 = SimConfig().t0_ns
    first = [p for p in red.ports if abs(p["t_ns"] - t0) <= SKEW_NS]
    assert sorted(p["nic"] for p in first) == sorted(topo.nics())
    assert all(p["state"] == "up" and p["link_downed"] == 0 for p in first)
    fault = red.truth["faults"][0]
    cable = fault["component"]["id"]
    nic = next(e for e in cable.split("~") if topo.kind(e) == "nic")
    changes = red.ports[len(first):]
    assert [(p["nic"], p["state"], p["link_downed"]) for p in changes] == [(nic, "down", 1)]
    assert abs(changes[0]["t_ns"] - fault["event_ns"]) <= SKEW_NS


def _downs(tmp_path, fault: str, **kw) -> tuple[list[dict], dict, Topology]:
    cfg = {"gpus": 64, "iterations": 4, "microbatches": 1, "seed": 2, "hosts_per_leaf": 2,
           "sample": 4, "hang_wait_s": 2.0, **kw, "faults": (FaultSpec.parse(fault),)}
    tr = run(tmp_path, **cfg)
    t0 = SimConfig().t0_ns
    return ([p for p in tr.ports if p["t_ns"] > t0 + SKEW_NS], tr.truth["faults"][0],
            Topology.load(tmp_path / "topology.json"))


def test_a_dead_leaf_takes_down_every_nic_cabled_to_it(tmp_path):
    changes, fault, topo = _downs(tmp_path, "dead_switch:leaf@2")
    leaf = fault["component"]["id"]
    cabled = {n for lk in topo.links_of(leaf) for n in lk.split("~") if topo.kind(n) == "nic"}
    assert cabled and {p["nic"] for p in changes} == cabled
    assert all(p["state"] == "down" for p in changes)
    assert all(abs(p["t_ns"] - fault["event_ns"]) <= SKEW_NS for p in changes)


@pytest.mark.parametrize("fault", ["dead_switch:spine@2", "dead_link:uplink@2",
                                   "slow_link:cable@2,slow=3", "rank_hang@2"])
def test_what_hosts_cannot_see_leaves_their_ports_up(tmp_path, fault):
    changes, _, _ = _downs(tmp_path, fault)
    assert changes == []


def test_a_dual_port_nic_losing_one_port_stays_up_and_counts_it(tmp_path):
    changes, fault, topo = _downs(tmp_path, "dead_link:cable@2", fabric="dual_port")
    nic = next(e for e in fault["component"]["id"].split("~") if topo.kind(e) == "nic")
    assert [(p["nic"], p["state"], p["link_downed"]) for p in changes] == [(nic, "up", 1)]
    changes, fault, _ = _downs(tmp_path / "nic", "dead_nic@2", fabric="dual_port")
    assert [(p["nic"], p["state"], p["link_downed"]) for p in changes] == \
        [(fault["component"]["id"], "down", 2)]


def test_k1_keeps_every_call_and_same_seed_same_bytes(tmp_path):
    kw = {"gpus": 64, "iterations": 3, "microbatches": 1, "seed": 4}
    full = simulate(SimConfig(**kw), tmp_path / "full")
    a = simulate(SimConfig(sample=1, **kw), tmp_path / "a")
    b = simulate(SimConfig(sample=1, **kw), tmp_path / "b")
    assert a.trace.read_bytes() == b.trace.read_bytes()
    assert _lines(a.trace, "op") == _lines(full.trace, "op")
    assert not _lines(a.trace, "conn") and _lines(a.trace, "linkstat")


# sha256 of trace.jsonl before --sample and --layers existed (same options and seeds)
GOLDEN = {
    "a": ({"gpus": 64, "iterations": 3, "microbatches": 1, "seed": 7},
          "dd736d7c3c7b977ca519b4f73504bbce59dfedde947a195f1e54f1c97a264c5c"),
    "b": ({"gpus": 128, "iterations": 6, "microbatches": 2, "seed": 9, "hosts_per_leaf": 4,
           "faults": ("slow_gpu:5@1,slow=1.5", "dead_link:cable@3")},
          "91b0c0753f5aebe7082e69cf81bcc77b963608169dce9a5ff3a043119a9fbdee"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_default_output_is_unchanged_byte_for_byte(tmp_path, case):
    kw, digest = GOLDEN[case]
    faults = tuple(FaultSpec.parse(f) for f in kw.get("faults", ()))
    for extra in ({}, {"layers": 1, "sample": None, "window_ms": 500.0}):
        res = simulate(SimConfig(**{**kw, "faults": faults, **extra}), tmp_path / str(extra))
        assert hashlib.sha256(res.trace.read_bytes()).hexdigest() == digest
        truth = json.loads(res.truth.read_text())
        assert truth["reduced"] is None and truth["layout"]["layers"] == 1
        assert truth["calls_per_s_per_rank"] > 5


def test_reduced_options_are_checked():
    with pytest.raises(SimError, match="--sample"):
        SimConfig(gpus=64, sample=0)
    with pytest.raises(SimError, match="--window-ms"):
        SimConfig(gpus=64, sample=4, window_ms=0)
    with pytest.raises(SimError, match="--layers"):
        SimConfig(gpus=64, layers=0)


def test_cli_sample_window_and_layers(tmp_path):
    from typer.testing import CliRunner

    from c4.cli import build_app

    res = CliRunner().invoke(build_app(), [
        "sim", "--gpus", "64", "--iterations", "2", "--microbatches", "1", "--layers", "2",
        "--sample", "16", "--window-ms", "250", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "calls/s per rank" in res.output and "progress" in res.output
    tr = read(tmp_path / "trace.jsonl")
    assert tr.meta["sample"] == 16 and {s["window_ns"] for s in tr.linkstats} >= {250_000_000}
    assert {o["op"] for o in tr.ops} <= {"all_gather", "reduce_scatter", "send", "recv",
                                         "all_reduce"}


@pytest.mark.parametrize("order", ["complete", "enter"])
def test_the_reducer_never_gets_an_event_after_its_window_closed(tmp_path, caplog, order):
    cfg = SimConfig(gpus=64, iterations=5, microbatches=2, seed=8, sample=4, window_ms=100,
                    layers=2, hang_wait_s=3.0,
                    faults=(FaultSpec.parse("slow_gpu:3@1,slow=2"),
                            FaultSpec.parse("dead_nic@3")))
    with caplog.at_level("WARNING", logger="diagnosis.sim.reduced"):
        res = simulate(cfg, tmp_path, order=order)
    assert not caplog.records
    assert res.records["progress"] and res.records["linkstat"]
