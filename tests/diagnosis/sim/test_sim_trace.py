"""The simulator writes valid, causal, reproducible traces of any size."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import numpy as np
import pytest
from simtrace_helpers import read, run

from c4.topology import Topology, link_id
from diagnosis.sim import SimConfig, SimError, simulate

SKEW_NS = 2 * 200_000   # two hosts' clock offsets at most


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return run(tmp_path_factory.mktemp("healthy"), gpus=128, iterations=6, microbatches=2,
               seed=5, checkpoint_every=4, gc_rate=0.01)


def test_every_member_has_an_op_line_per_collective(healthy):
    members: dict[tuple[str, int], set[int]] = defaultdict(set)
    for o in healthy.ops:
        if o["op"] not in ("send", "recv"):
            members[o["pg"], o["seq"]].add(o["rank"])
    assert members
    for (pg, seq), ranks in members.items():
        assert ranks == set(healthy.groups[pg]), (pg, seq)
    kinds = {pg.split(".")[0] for pg, _ in members}
    assert kinds == {"tp", "dp"}
    per_group = defaultdict(set)
    for pg, seq in members:
        per_group[pg].add(seq)
    # tp: 2 per microbatch per iteration; dp: one per iteration; numbered 0, 1, 2, ...
    assert per_group["tp.0"] == set(range(6 * 2 * 2))
    assert per_group["dp.0"] == set(range(6))


def test_collective_members_share_start_and_end(healthy):
    t = healthy.op_table()
    coll = t["op"] == "all_reduce"
    by_call: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i in np.flatnonzero(coll):
        by_call[t["pg"][i], t["seq"][i]].append(i)
    for rows in by_call.values():
        starts, ends, enters = t["t_start_ns"][rows], t["t_end_ns"][rows], t["t_enter_ns"][rows]
        assert np.ptp(starts) <= SKEW_NS and np.ptp(ends) <= SKEW_NS
        # the transfer starts when the last member arrives
        assert abs(starts.max() - enters.max()) <= SKEW_NS


def test_send_recv_pair_by_seq(healthy):
    sends, recvs = {}, {}
    for o in healthy.ops:
        if o["op"] == "send":
            sends[o["pg"], o["rank"], o["peer"], o["seq"]] = o
        elif o["op"] == "recv":
            recvs[o["pg"], o["peer"], o["rank"], o["seq"]] = o
    assert sends and sends.keys() == recvs.keys()
    for key, s in sends.items():
        r = recvs[key]
        assert abs(s["t_start_ns"] - r["t_start_ns"]) <= SKEW_NS
        assert abs(s["t_end_ns"] - r["t_end_ns"]) <= SKEW_NS
        assert healthy.groups[key[0]].count(key[1]) == 1


def test_times_are_ordered(healthy):
    t = healthy.op_table()
    assert (t["t_enter_ns"] <= t["t_start_ns"]).all()
    assert (t["t_start_ns"] < t["t_end_ns"]).all()
    # a rank makes one call at a time
    for r in range(128):
        mine = t["rank"] == r
        order = np.argsort(t["t_enter_ns"][mine])
        enters, ends = t["t_enter_ns"][mine][order], t["t_end_ns"][mine][order]
        assert (enters[1:] >= ends[:-1]).all()
    assert healthy.end_ns >= max(t["t_end_ns"].max(), max(c["t_end_ns"] for c in healthy.conns))


def test_conn_records_follow_topology_paths(healthy):
    topo = Topology.load(healthy.dir / "topology.json")
    links = set(topo.links())
    calls = {(o["pg"], o["seq"]) for o in healthy.ops}
    for c in healthy.conns:
        path = c["path"]
        assert path[0] == healthy.ranks[c["src"]]["nic"]
        assert path[-1] == healthy.ranks[c["dst"]]["nic"]
        assert all(link_id(a, b) in links for a, b in itertools.pairwise(path))
        assert path in topo.paths(path[0], path[-1])
        assert c["t_start_ns"] < c["t_end_ns"] and c["bytes"] > 0
        assert (c["pg"], c["seq"]) in calls


def test_rank_records_match_topology(healthy):
    topo = Topology.load(healthy.dir / "topology.json")
    for _r, rec in healthy.ranks.items():
        assert topo.host_of(rec["gpu"]) == rec["host"] == topo.host_of(rec["nic"])
        assert topo.nic_of_gpu(rec["gpu"]) == rec["nic"]
    # tp inside a host, dp on one rail across hosts, pp stages on different hosts
    for pg, ranks in healthy.groups.items():
        hosts = {healthy.ranks[r]["host"] for r in ranks}
        nics = {healthy.ranks[r]["nic"].split("/")[1] for r in ranks}
        if pg.startswith("tp."):
            assert len(hosts) == 1
        else:
            assert len(hosts) == len(ranks)
        if pg.startswith("dp."):
            assert len(nics) == 1


def test_benign_noise_is_present_and_documented(healthy):
    truth = healthy.truth
    assert truth["faults"] == [] and truth["stalled"] is False
    assert truth["benign"]["checkpoint_iterations"] == [3]
    assert len(truth["iteration_start_ns"]) == 6
    ends = sorted(o["t_end_ns"] for o in healthy.ops if o["pg"] == "dp.0" and o["rank"] == 0)
    period = np.diff([0, *ends])
    # warm-up is slower; the checkpoint after iteration 3 delays iteration 4
    assert period[0] > 1.5 * np.median(period[2:])
    assert period[4] > np.median(period[2:4]) + 1e9


def test_transient_congestion_is_logged_and_slows_its_uplink_briefly(tmp_path):
    tr = run(tmp_path, gpus=512, iterations=8, microbatches=1, seed=2, congestion_rate=1.0,
             congestion_iters=(1, 1), congestion_keep=(0.3, 0.3))
    events = tr.truth["benign"]["congestion"]
    assert events and tr.truth["faults"] == []
    ev = events[0]
    link, it = ev["link"], ev["iterations"][0]
    a, b = ev["link"].split("~")
    durs = defaultdict(dict)
    for c in tr.conns:
        p = c["path"]
        if c["pg"].startswith("dp") and any({x, y} == {a, b} for x, y in itertools.pairwise(p)):
            durs[c["src"], c["dst"]][c["seq"]] = c["t_end_ns"] - c["t_start_ns"]
    assert durs, link
    slowed = [d[it] / d[j] for d in durs.values() for j in d
              if j != it and not any(j in e["iterations"] and e["link"] == link
                                     for e in events)]
    assert min(slowed) > 1.5


def test_same_seed_same_files_other_seed_differs(tmp_path):
    kw = {"gpus": 64, "iterations": 3, "microbatches": 1,
          "faults": ()}
    a = simulate(SimConfig(seed=7, **kw), tmp_path / "a")
    b = simulate(SimConfig(seed=7, **kw), tmp_path / "b")
    c = simulate(SimConfig(seed=8, **kw), tmp_path / "c")
    assert a.trace.read_bytes() == b.trace.read_bytes()
    assert a.truth.read_text() == b.truth.read_text()
    assert a.trace.read_bytes() != c.trace.read_bytes()


def test_gzip_output_reads_back(tmp_path):
    res = simulate(SimConfig(gpus=64, iterations=2, microbatches=1), tmp_path, compress=True)
    assert res.trace.name.endswith(".gz")
    tr = read(res.trace)
    assert len(tr.ops) == res.ops and len(tr.conns) == res.conns


def test_no_conns_option(tmp_path):
    tr = run(tmp_path, gpus=64, iterations=2, microbatches=1, conns=False)
    assert tr.ops and not tr.conns


def test_no_paths_option_keeps_the_conns_without_their_route(tmp_path):
    with_paths = run(tmp_path / "a", gpus=64, iterations=2, microbatches=1)
    without = run(tmp_path / "b", gpus=64, iterations=2, microbatches=1, paths=False)
    assert with_paths.conns and all("path" in c for c in with_paths.conns)
    assert len(without.conns) == len(with_paths.conns)
    assert not any("path" in c for c in without.conns)


def test_bad_layouts_are_refused():
    with pytest.raises(SimError, match="--tp"):
        SimConfig(gpus=64, tp=3)
    with pytest.raises(SimError, match="multiple"):
        SimConfig(gpus=100)


def test_16k_gpus_two_iterations(tmp_path):
    gpus, M, T, P = 16384, 1, 8, 4
    D = gpus // (T * P)
    res = simulate(SimConfig(gpus=gpus, iterations=2, microbatches=M, seed=1), tmp_path)
    tp_ops = gpus * 2 * M
    p2p_ops = 2 * 2 * M * D * T * (P - 1)        # send + recv, forward + backward
    assert res.ops == 2 * (tp_ops + p2p_ops + gpus)
    assert res.conns == 2 * (p2p_ops // 2 + gpus)
    lines = defaultdict(int)
    with open(res.trace, "rb") as fh:
        for line in fh:
            lines[line[9:13]] += 1
    assert lines[b'op",'] == res.ops and lines[b'conn'] == res.conns
    assert lines[b'rank'] == gpus and lines[b'end"'] == 1
    assert json.loads(res.truth.read_text())["iterations"] == 2


def test_records_come_in_completion_order(healthy, tmp_path):
    def vis(rows, start):
        return [r.get("t_end_ns") or r[start] for r in rows]
    ops, conns = vis(healthy.ops, "t_enter_ns"), vis(healthy.conns, "t_start_ns")
    assert ops == sorted(ops) and conns == sorted(conns)
    # --order enter: each iteration's block sorted by entry instead; same records
    res = simulate(SimConfig(gpus=128, iterations=6, microbatches=2, seed=5, checkpoint_every=4,
                             gc_rate=0.01), tmp_path, order="enter")
    other = read(res.trace)
    assert sorted(map(str, other.ops)) == sorted(map(str, healthy.ops))
    assert [o["t_enter_ns"] for o in other.ops] != [o["t_enter_ns"] for o in healthy.ops]


def test_cli_writes_the_three_files_and_refuses_bad_faults(tmp_path):
    from typer.testing import CliRunner

    from c4.cli import build_app

    app, runner = build_app(), CliRunner()
    res = runner.invoke(app, ["sim", "--gpus", "64", "--iterations", "3", "--microbatches", "1",
                              "--fault", "slow_gpu:3@1,slow=1.5", "--seed", "2", "--no-conns",
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    tr = read(tmp_path / "trace.jsonl")
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert tr.ops and not tr.conns and truth["faults"][0]["ranks"] == [3]
    assert Topology.load(tmp_path / "topology.json").hosts()
    res = runner.invoke(app, ["sim", "--out", str(tmp_path), "--fault", "slow_gpu,slow=0.5"])
    assert res.exit_code != 0 and "slow=0.5" in res.output
