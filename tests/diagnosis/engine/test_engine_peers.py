"""Connections slow from their first transfer on, judged against their peers: eight hosts, four
per leaf, two spines; an all-reduce ring 0>1>...>7>0 every 200 ms, whose hops 3>4 and 7>0 cross
the spines. A connection's own baseline is learnt on its first transfers, so a component
degraded before recording began is only seen against the other connections."""

from __future__ import annotations

import itertools

import numpy as np

from c4.topology.builders import rail_optimized
from diagnosis.engine import Engine
from diagnosis.trace import TraceWriter
from diagnosis.trace.feed import feed_trace
from tests.support.engine_builders import lockstep, nic, one_rank_hosts

MS = 1_000_000
T0 = 1_000 * MS
HOSTS = 8


def leaf(r: int) -> str:
    return f"leaf0{r // 4}r0"


def hops_of(s: int, d: int) -> list[str]:
    return [nic(s), leaf(s)] + (["spine00"] if leaf(s) != leaf(d) else []) \
        + ([leaf(d)] if leaf(s) != leaf(d) else []) + [nic(d)]


RING = [(s, (s + 1) % HOSTS) for s in range(HOSTS)]


def diagnose(tmp_path, slow_link: str, factor: float, flows=RING, paths: bool = True,
             iterations: int = 40, late=(), engines: list | None = None):
    """``slow_link`` is ``factor`` times slower from the first iteration to the last. The
    ``flows`` of an iteration run side by side: a flow takes as long as its most shared
    directed hop allows (two flows on one uplink in one direction: twice as long); those in
    ``late`` begin an iteration after the others."""
    rng = np.random.default_rng(0)
    path = tmp_path / "trace.jsonl"
    shared: dict[tuple[str, str], int] = {}
    for s, d in flows:
        for hop in itertools.pairwise(hops_of(s, d)):
            shared[hop] = shared.get(hop, 0) + 1
    with TraceWriter(path) as w:
        one_rank_hosts(w, HOSTS)
        w.group("dp", list(range(HOSTS)))
        for it in range(iterations):
            t = T0 + it * 200 * MS
            ends = []
            for s, d in flows:
                if it == 0 and (s, d) in late:
                    continue
                hops = hops_of(s, d)
                links = {"~".join(sorted(p)) for p in itertools.pairwise(hops)}
                load = max(shared[hop] for hop in itertools.pairwise(hops))
                dur = 8 * MS * load * np.exp(rng.normal(0, 0.02)) \
                    * (factor if slow_link in links else 1.0)
                ends.append(int(t + dur))
                w.conn(s, d, 32 << 20, t, ends[-1], pg="dp", seq=it,
                       path=hops if paths else None)
            lockstep(w, "dp", it, "all_reduce", 64 << 20, np.full(HOSTS, t), max(ends) + MS)
        w.end(T0 + iterations * 200 * MS)
    topo = rail_optimized(HOSTS, 1, hosts_per_leaf=4, spines=1)
    eng = Engine(topo)
    if engines is not None:
        engines.append(eng)
    reports, _ = feed_trace(eng, path)
    return reports


def test_a_cable_slow_since_the_start_is_named_against_its_peers(tmp_path):
    # 2>3 and 3>4 cross node003's cable and take 1.6x as long as the six other hops
    reports = diagnose(tmp_path, f"{leaf(3)}~{nic(3)}", 1.6)
    assert [r.kind for r in reports] == ["comm_slow"]
    r = reports[0]
    assert {(s.type, s.id) for s in r.suspects[:2]} == {("nic", nic(3)),
                                                         ("link", f"{leaf(3)}~{nic(3)}")}
    assert "than their peers" in r.summary
    assert sorted(r.evidence["slow"]) == ["2>3", "3>4"]


def test_an_uplink_slow_since_the_start_is_named_against_the_load_on_it(tmp_path):
    # 3>4 and 7>0 cross the uplink of leaf00r0, each alone on it in its direction, and take
    # twice as long as the rest: no collision explains that
    reports = diagnose(tmp_path, f"{leaf(3)}~spine00", 2.0)
    assert [r.kind for r in reports] == ["comm_slow"]
    r = reports[0]
    assert (r.suspects[0].type, r.suspects[0].id) == ("link", f"{leaf(3)}~spine00")
    assert "same load" in r.summary
    assert sorted(r.evidence["slow"]) == ["3>4", "7>0"]


def test_an_ecmp_collision_is_no_fault(tmp_path):
    # 2>5 hashed onto the same uplink as 3>4, in the same direction: both take twice as long
    # as the flows alone on their path, which their load explains
    flows = [*RING, (2, 5)]
    assert diagnose(tmp_path, "none", 1.0, flows=flows) == []


def test_without_paths_only_the_host_edge_is_named(tmp_path):
    # the same slow uplink, but the records do not say which way each flow went: a flow slow
    # beyond its NICs' load may have hashed onto a busy uplink, so nothing is named
    assert diagnose(tmp_path, f"{leaf(3)}~spine00", 2.0, paths=False) == []
    # while a cable slow since the start still is (its NIC's load is known without paths)
    reports = diagnose(tmp_path, f"{leaf(3)}~{nic(3)}", 1.6, paths=False)
    assert [r.kind for r in reports] == ["comm_slow"]
    assert {(s.type, s.id) for s in reports[0].suspects[:2]} == {
        ("nic", nic(3)), ("link", f"{leaf(3)}~{nic(3)}")}


def test_a_partner_too_new_to_judge_still_counts_for_the_load(tmp_path):
    # the job stops early (an error): 2>5, which shares 3>4's uplink, began an iteration late
    # and has one transfer fewer, too few to be judged itself; 3>4 is judged, and its load
    # is still two flows
    flows = [*RING, (2, 5)]
    assert diagnose(tmp_path, "none", 1.0, flows=flows, iterations=11, late={(2, 5)}) == []


def test_the_noise_of_a_large_fleet_is_read_over_a_spread_of_its_connections(tmp_path,
                                                                             monkeypatch):
    # past _SIGMA_KEYS connections, one sample's noise comes from an even spread of them (at
    # half a million connections every ring was tens of millions of samples): the verdicts
    # are the same
    from diagnosis.engine import peers

    whole = diagnose(tmp_path, f"{leaf(3)}~{nic(3)}", 1.6)
    monkeypatch.setattr(peers, "_SIGMA_KEYS", 3)
    spread = diagnose(tmp_path, f"{leaf(3)}~{nic(3)}", 1.6)
    assert [(r.kind, r.suspects[0].id, r.evidence["slow"]) for r in spread] == \
        [(r.kind, r.suspects[0].id, r.evidence["slow"]) for r in whole]
    assert diagnose(tmp_path, "none", 1.0, flows=[*RING, (2, 5)]) == []


def test_a_large_fleet_moves_as_its_newest_samples_say(tmp_path, monkeypatch):
    # past _MOVING_KEYS connections, how many move at once is read from each one's newest
    # samples only (its whole ring, in order, took seconds at half a million): the verdicts
    # on the load are the same
    from diagnosis.engine import peers

    uplink = f"{leaf(3)}~spine00"
    cases = [dict(slow_link=uplink, factor=1.6), dict(slow_link=f"{leaf(3)}~{nic(3)}",
                                                      factor=1.6),
             dict(slow_link="none", factor=1.0, flows=[*RING, (2, 5)])]
    whole = [diagnose(tmp_path, **c) for c in cases]
    monkeypatch.setattr(peers, "_MOVING_KEYS", 3)
    monkeypatch.setattr(peers, "_MOVING_SAMPLES", 8)
    newest = [diagnose(tmp_path, **c) for c in cases]
    assert [[(r.kind, r.suspects[0].id) for r in rs] for rs in newest] == \
        [[(r.kind, r.suspects[0].id) for r in rs] for rs in whole]
    assert whole[0] and whole[1] and not whole[2]


def test_the_hops_of_any_keys_are_read_from_the_table_of_every_key(tmp_path):
    engines: list[Engine] = []
    diagnose(tmp_path, "none", 1.0, flows=[*RING, (2, 5)], engines=engines)
    eng = engines[0]
    load, win = eng.localizer.load, eng.conns
    assert load is not None and len(win) == 9

    def nic_of(rank: int) -> str | None:
        return eng.placement.nic(rank)

    for keys in ([0, 1, 2, 3, 4, 5, 6, 7, 8], [8, 2, 5], [3], []):
        k = np.asarray(keys, dtype=np.int64)
        flat, counts, routed = load.hop_table(win, k, nic_of)
        each = [load.hops(win, int(x), nic_of) for x in keys]
        assert counts.tolist() == [len(h) for h, _ in each]
        assert flat.tolist() == [int(v) for h, _ in each for v in h]
        assert routed.tolist() == [r for _, r in each]


def test_a_connection_whose_rank_is_placed_later_gets_its_hops(tmp_path):
    from diagnosis.engine.peers import LoadModel

    engines: list[Engine] = []
    diagnose(tmp_path, "none", 1.0, flows=[*RING, (2, 5)], engines=engines, paths=False)
    eng = engines[0]
    win, load = eng.conns, LoadModel(eng.topology)
    placed = {r for r in range(HOSTS) if r != 2}

    def nic_of(rank: int) -> str | None:
        return eng.placement.nic(rank) if rank in placed else None
    keys = np.arange(len(win))
    touching = [k for k in keys.tolist() if 2 in (int(win.src[k]), int(win.dst[k]))]
    _, counts, _ = load.hop_table(win, keys, nic_of)
    assert touching and (counts[touching] == 0).all() and (np.delete(counts, touching) > 0).all()
    placed.add(2)
    _, counts, _ = load.hop_table(win, keys, nic_of)
    assert (counts > 0).all()


def test_the_table_follows_new_keys_and_recorded_paths(tmp_path):
    from diagnosis.engine.peers import LoadModel

    engines: list[Engine] = []
    diagnose(tmp_path, "none", 1.0, flows=[*RING, (2, 5)], engines=engines, paths=False)
    eng = engines[0]
    win, load = eng.conns, LoadModel(eng.topology)

    def nic_of(rank: int) -> str | None:
        return eng.placement.nic(rank)

    def matches_each_key() -> None:
        keys = np.arange(len(win))[::-1]
        flat, counts, routed = load.hop_table(win, keys, nic_of)
        each = [load.hops(win, int(x), nic_of) for x in keys]
        assert counts.tolist() == [len(h) for h, _ in each]
        assert flat.tolist() == [int(v) for h, _ in each for v in h]
        assert routed.tolist() == [r for _, r in each]

    matches_each_key()                      # every key from its NICs, at once
    n = len(win)
    # a second communicator's connections appear, one of them between two ranks of a host
    # (no link crossed)
    win.keys_of(np.array([0, 6, 3]), np.array([4, 2, 3]), np.array([5, 5, 5]))
    assert len(win) == n + 3
    matches_each_key()
    # a path is recorded for one: its hops are then the links of its path
    k = 2
    win.set_paths(np.array([k]), [hops_of(int(win.src[k]), int(win.dst[k]))])
    matches_each_key()
    _, counts, routed = load.hop_table(win, np.array([k]), nic_of)
    assert routed.tolist() == [True]
    assert counts[0] == len(hops_of(int(win.src[k]), int(win.dst[k]))) - 1
