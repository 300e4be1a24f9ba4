"""The accuracy bench's stream mode with reduced telemetry: the engine gets what a live daemon
receives from the job's edge (sampled op rows, progress, linkstat, port records), as it
becomes visible, and the bench notes when each report appeared."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from bench.accuracy.analyze import analyze_file, analyze_stream
from bench.accuracy.run import main, with_samples
from bench.accuracy.scenarios import scenarios
from diagnosis.engine import Engine
from diagnosis.sim import simulate

FEEDS = ("add_ops", "add_progress", "add_linkstats", "add_ports")


def _scenario(kind: str, k: int, gpus: int = 64):
    todo = [s for s in scenarios([gpus], 1, False, kinds=[kind]) if s.label == kind]
    return with_samples(todo, (k,), 1000.0)[0]


def _rows(name: str, recs) -> list[tuple]:
    """The rows of one engine feed, strings resolved, comparable across feeds."""
    if name == "add_ops":
        pg = np.asarray(recs.strings, dtype=object)[recs["pg"]]
        return list(zip(recs["rank"].tolist(), pg.tolist(), recs["seq"].tolist(),
                        recs["status"].tolist(), recs["t_end_ns"].tolist()))
    s = [*recs.strings, None]
    if name == "add_progress":
        return list(zip(recs.rank.tolist(), [s[i] for i in recs.pg.tolist()],
                        [s[i] for i in recs.op.tolist()], recs.peer.tolist(),
                        recs.t_ns.tolist(), recs.entered.tolist(), recs.completed.tolist()))
    if name == "add_linkstats":
        cols = [getattr(recs, c).tolist() for c in (
            "src", "dst", "t_ns", "window_ns", "transfers", "bytes", "busy_ns", "max_ns",
            "open", "open_since_ns", "retrans")]
        return list(zip(*cols, [s[i] for i in recs.pg.tolist()],
                        recs.paths or [None] * len(recs)))
    return list(zip([s[i] for i in recs.host.tolist()], [s[i] for i in recs.nic.tolist()],
                    recs.t_ns.tolist(), recs.up.tolist(),
                    recs.counters["link_downed"].tolist()))


@pytest.fixture
def fed(monkeypatch):
    """What the engine is fed: rows per method, the engine clock at each feed, the factors."""
    got: dict = {"rows": {n: Counter() for n in FEEDS}, "calls": [], "sample": []}
    set_sample = Engine.set_sample
    monkeypatch.setattr(Engine, "set_sample", lambda self, k, *a, **kw: (
        got["sample"].append(k), set_sample(self, k, *a, **kw)))
    def spied(name: str):
        orig = getattr(Engine, name)

        def feed(self, recs):
            got["rows"][name].update(_rows(name, recs))
            got["calls"].append(name)
            return orig(self, recs)
        return feed
    for name in FEEDS:
        monkeypatch.setattr(Engine, name, spied(name))

    def reset() -> None:
        got["rows"] = {n: Counter() for n in FEEDS}
        got["calls"], got["sample"] = [], []
    got["reset"] = reset
    return got


def test_stream_at_k8_finds_a_dead_link_from_progress_linkstat_and_ports(fed):
    sc = _scenario("dead_link", 8)
    reports, truth = analyze_stream(sc.cfg)
    assert fed["sample"] == [8]
    rows = {n: sum(c.values()) for n, c in fed["rows"].items()}
    assert all(rows.values()), rows
    assert {k: truth["records"][k] for k in ("op", "progress", "linkstat", "port")} == {
        "op": rows["add_ops"], "progress": rows["add_progress"],
        "linkstat": rows["add_linkstats"], "port": rows["add_ports"]}
    # fed window by window as the windows close, not at the end
    assert fed["calls"].count("add_progress") > 10
    hangs = [r for r in reports if r["kind"] == "comm_hang"]
    assert hangs, [r["kind"] for r in reports]
    fault = truth["faults"][0]
    link = fault["component"]["id"]
    assert any(s["id"] in (link, *link.split("~")) for s in hangs[0]["suspects"][:2])
    # it appeared at a step of the stream, after the link died and before recording stopped
    assert all("detected_ns" in r for r in reports)
    assert fault["event_ns"] <= hangs[0]["detected_ns"] < truth["end_ns"]


@pytest.mark.parametrize("kind", ["dead_nic", "slow_link", "rank_hang"])
def test_stream_feeds_what_the_reduced_trace_holds_and_reports_the_same(kind, fed, tmp_path):
    """The same rows of every kind as the trace of the same run (only their timing differs),
    and the same reports: kinds and first suspects."""
    sc = _scenario(kind, 8)
    streamed, _ = analyze_stream(sc.cfg)
    by_stream = fed["rows"]
    fed["reset"]()
    res = simulate(sc.cfg, tmp_path)
    traced = analyze_file(res.trace, res.topology)
    assert fed["sample"] == [8]
    for name in FEEDS:
        assert by_stream[name] == fed["rows"][name], name

    def top(reports):
        return sorted((r["kind"], tuple((s["type"], s["id"]) for s in r["suspects"][:1]))
                      for r in reports)
    assert streamed and top(streamed) == top(traced)


def test_full_stream_stays_as_it_was(fed):
    """K=1 (no --sample): every op and conn row, no reduced records, no factor set."""
    sc = _scenario("slow_gpu", 1)
    sc = replace(sc, cfg=replace(sc.cfg, iterations=12, faults=()))
    _, truth = analyze_stream(sc.cfg)
    assert fed["sample"] == []
    assert sum(fed["rows"]["add_ops"].values()) == truth["records"]["op"] > 0
    assert not fed["calls"].count("add_progress") and not fed["calls"].count("add_ports")


def test_stream_bench_prints_latency_per_factor(capsys):
    assert main(["--gpus", "64", "--seeds", "1", "--kinds", "dead_nic", "--sample", "1,8",
                 "--mode", "stream"]) == 0
    text = capsys.readouterr().out
    assert "K=8: reduced stream" in text and "as the edge ships them" in text
    table = text[text.index("K=8: reduced stream"):text.index("the same scenarios")]
    row = next(ln for ln in table.splitlines() if " dead_nic " in ln).split()
    lat_s, lat_it = row[10], row[11]            # after the target column
    assert float(lat_s) >= 0 and int(lat_it) >= 0
    comp = text[text.index("the same scenarios"):]
    assert "Δlat s" in comp
    cells = next(ln for ln in comp.splitlines() if " dead_nic " in ln).split()
    assert "/" in cells[-1]                          # the paired difference, median/worst
    assert "in stream mode, when each report appeared" in comp


def test_stream_reports_an_error_whose_peers_show_up_only_in_progress():
    """The failing rank's row comes at once; its peers' entries into the call only with the
    next window's progress. The error is first held naming the peers as absent, then corrected:
    a correction is the same failure, not a second one that would make it look like a
    teardown (it was dropped as one)."""
    sc = _scenario("error", 16, gpus=128)
    reports, truth = analyze_stream(replace(sc.cfg, layers=8))
    errors = [r for r in reports if r["kind"] == "error"]
    fault = truth["faults"][0]
    assert errors and errors[0]["suspects"][0]["id"] == fault["component"]["id"], reports
