"""The report of a job too large for per-rank views (128 ranks on 16 hosts here, the same code
path as 4,096): per-host and per-rail heatmaps, the latest ranks and slowest connections
named, the topology drawn around every suspect; progress on stderr."""

from __future__ import annotations

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.report import FaultReport, Suspect
from c4.topology.builders import rail_optimized
from diagnosis.report_html import from_trace, render
from diagnosis.report_html.neighbourhood import neighbourhood
from diagnosis.report_html.placement import placement
from diagnosis.trace import TraceWriter
from tests.support.browser import screenshot

HOSTS, GPUS, STEPS = 16, 8, 60
RANKS = HOSTS * GPUS
LATE = 77                   # node009/gpu5, late from a third of the way on
SLOW = (20, 28)             # node002 -> node003 on rail 4, ten times slower than the rest
T0 = 1_700_000_000_000_000_000


def _topology():
    return rail_optimized(HOSTS, GPUS, hosts_per_leaf=4)


def _write_trace(path, topo) -> None:
    place = topo.default_placement(RANKS)
    with TraceWriter(path) as w:
        w.meta("bigjob")
        for r in range(RANKS):
            host, gpu, nic = place[r]
            w.rank(r, host, gpu, nic)
        w.group("dp", list(range(RANKS)))
        for step in range(STEPS):
            base = T0 + step * 50_000_000
            for r in range(RANKS):
                late = 20_000_000 if r == LATE and step > STEPS // 3 else 0
                w.op(r, "dp", step, "all_reduce", 1 << 20, base + (r % 7) * 10_000 + late,
                     base + 30_000_000)
            for r in range(RANKS):      # a ring per rail across the hosts
                dst = (r + GPUS) % RANKS
                secs = 0.004 if (r, dst) == SLOW else 0.0004
                t = base + 31_000_000
                w.conn(r, dst, 1 << 20, t, t + int(secs * 1e9), pg="dp", seq=step)
        w.end(T0 + STEPS * 50_000_000)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("big")
    topo = _topology()
    topo.save(tmp / "topo.json")
    _write_trace(tmp / "trace.jsonl", topo)
    data = from_trace(tmp / "trace.jsonl", topology=tmp / "topo.json")
    # the report draws what the faults name: one suspect GPU and one suspect link, whatever
    # the detectors made of this synthetic trace
    data.faults = [
        FaultReport("noncomm_slow", (Suspect("gpu", "node009/gpu5", 0.9, rank=LATE),),
                    T0 + 20 * 50_000_000, "rank 77 is late", id="slow-77"),
        FaultReport("comm_slow", (Suspect("link", "node002/nic4~leaf00r4", 0.8),),
                    T0 + 10 * 50_000_000, "a slow link", id="link-1")]
    return tmp, data, render(data)


def _section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}</h2>")
    end = page.find("<h2>", start + 1)
    return page[start:end if end > 0 else None]


def test_a_large_job_is_summarised_per_host_and_rail(big):
    _, _, page = big
    for title in ("Lateness over time, per host", "Lateness over time, per rail",
                  "Transfer rate per host and rail"):
        assert "<svg" in _section(page, title), title
    assert "source x destination" not in page and "Per-rank lateness" not in page
    assert "Latest on average: host node009," in page
    host_rail = _section(page, "Transfer rate per host and rail")
    assert "Slowest: host node002, rail 4," in host_rail
    # the suspect's host is named on the host heatmap, in red, among at most 24 + 1 names
    hosts = _section(page, "Lateness over time, per host")
    red = re.findall(r'<text[^>]*fill: #d7191c[^>]*>\s*([^<\s]+)', hosts)
    assert "node009" in red


def test_the_timeline_runs_on_the_heatmaps_clock(big):
    # a fault's bar starts where its shading does on the heatmaps (seconds since the first
    # call), not at 0 of a clock of its own
    _, _, page = big
    timeline = _section(page, "Timeline of faults and recoveries")
    assert "seconds since the first call" in timeline and "first event" not in timeline
    rails = _section(page, "Lateness over time, per rail")
    assert "Latest on average: rail 5," in rails, rails[-600:]


def test_the_latest_ranks_and_slowest_connections_are_listed(big):
    _, _, page = big
    latest = page[page.index("latest ranks</h3>"):]
    assert re.search(r"<tr><td>77</td><td>node009/gpu5</td><td>\+", latest)
    slow = page[page.index("slowest of"):]
    first = re.search(r"<tr><td>([^<]+)</td>", slow).group(1)
    assert first == "20 -&gt; 28"
    assert re.search(r"slowest of 128 connections", slow)


def test_the_topology_is_drawn_around_every_suspect(big):
    _, _, page = big
    topo = _section(page, "Topology and suspects")
    texts = set(re.findall(r"<text[^>]*>\s*([^<\s]+)", topo))
    assert {"node009/gpu5", "node009", "node002", "leaf02r5", "leaf00r4"} <= texts
    assert "node005" not in texts                     # a host with no suspect on it
    assert "Suspects in red (2): node009/gpu5, node002/nic4~leaf00r4" in topo
    assert re.search(r"drawn: the \d+ around the suspects", topo)
    assert "not drawn: the 6 other hosts on those switches" in topo


def test_the_neighbourhood_climbs_to_the_spines_and_leaves_other_hosts_out():
    topo = _topology()
    near = neighbourhood(topo, {"node009/gpu5"})
    g = topo.graph
    hosts = {n for n in near.nodes if g.nodes[n]["kind"] == "host"}
    assert hosts == {"node009"}
    assert set(topo.gpus("node009")) | set(topo.nics("node009")) <= near.nodes
    assert {f"leaf02r{r}" for r in range(GPUS)} <= near.nodes
    assert set(topo.switches("spine")) <= near.nodes
    assert not any(n.startswith("leaf00") for n in near.nodes)
    assert near.hidden_hosts == 3          # the other hosts of leaf group 2


def test_rails_come_from_the_topology_else_the_position_on_the_host():
    topo = _topology()
    place = topo.default_placement(RANKS)
    hosts = {r: p[0] for r, p in place.items()}
    nics = {r: p[2] for r, p in place.items() if p[2]}
    gpus = {r: p[1] for r, p in place.items()}
    with_topo = placement(RANKS, hosts, gpus, nics, topo)
    assert with_topo.rail_of.tolist() == [r % GPUS for r in range(RANKS)]
    assert "topology" in with_topo.rail_source
    # no topology, and ranks placed round-robin over two hosts: rank r is GPU r // 2
    rr = {r: f"h{r % 2}" for r in range(8)}
    alone = placement(8, rr, {}, {})
    assert alone.hosts == ["h0", "h1"]
    assert alone.host_of.tolist() == [0, 1] * 4
    assert alone.rail_of.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert np.array_equal(alone.rail_of, np.repeat(np.arange(4), 2))


def test_renders_in_headless_chromium(big, tmp_path):
    _, _, page = big
    out = tmp_path / "big.html"
    out.write_text(page)
    img = screenshot(out, tmp_path / "big.png", size=(1300, 4400))
    # the suspect's red is drawn somewhere on the page (topology, host names)
    assert any(r > 200 and g < 60 and b < 60 for _, (r, g, b) in img.getcolors(1 << 20))


def test_the_cli_shows_its_progress_on_stderr(big, tmp_path):
    tmp, _, _ = big
    out = tmp_path / "big.html"
    res = CliRunner().invoke(build_app(), ["report", "--html", str(out), "--trace",
                                           str(tmp / "trace.jsonl"), "--topology",
                                           str(tmp / "topo.json")])
    assert res.exit_code == 0, res.output
    steps = [ln for ln in res.stderr.splitlines() if ln.startswith("c4 report: [")]
    assert len(steps) >= 5 and any("drawing lateness per host" in s for s in steps), steps
    assert "wrote the report" in res.stdout and "c4 report: [" not in res.stdout
