"""``c4 report --html``: built from a trace offline and from a real daemon, self-contained, and
rendered by a real headless Chromium without errors into a screenshot that is not blank."""

from __future__ import annotations

import re
import shutil
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from c4.cli import build_app
from c4.proto import c4_pb2
from c4.proto.codec import Columns, encode_ops
from c4.topology.builders import rail_optimized
from diagnosis.client import DaemonClient
from diagnosis.daemon.config import DaemonConfig
from diagnosis.daemon.server import Daemon
from diagnosis.report_html import from_trace
from diagnosis.report_html.plots import lateness
from diagnosis.trace import TraceWriter
from recovery.journal import Journal
from recovery.states import State
from tests.support.browser import screenshot

RANKS, STEPS, LATE, SLOW = 16, 120, 5, (9, 10)
# recent: the daemon refuses records far from its clock
T0 = (time.time_ns() // 10**9 - 3600) * 10**9


def _write_trace(path, topo) -> None:
    place = topo.default_placement(RANKS)
    with TraceWriter(path) as w:
        w.meta("trainjob")
        for r in range(RANKS):
            host, gpu, nic = place[r]
            w.rank(r, host, gpu, nic)
        w.group("dp", list(range(RANKS)))
        for step in range(STEPS):
            base = T0 + step * 50_000_000
            for r in range(RANKS):
                late = 20_000_000 if r == LATE and step > STEPS // 3 else 0
                enter = base + r * 10_000 + late
                w.op(r, "dp", step, "all_reduce", 1 << 20, enter, base + 30_000_000)
            for r in range(RANKS):   # a ring of sends, one slow connection
                dst = (r + 1) % RANKS
                secs = 0.004 if (r, dst) == SLOW else 0.0004
                t = base + 31_000_000
                w.conn(r, dst, 1 << 20, t, t + int(secs * 1e9), pg="dp", seq=step)
        w.end(T0 + STEPS * 50_000_000)


def _journal(path) -> None:
    with Journal(path) as j:
        rec = j.create_recovery(job="trainjob", fault_id="f1", node="node001", backend="blocklist",
                                onset_ns=T0 + 2 * 10**9, report_ns=T0 + 3 * 10**9,
                                reason="slow rank", now_ns=T0 + 3 * 10**9)
        j.transition(rec.id, State.ISOLATING, t_ns=T0 + 3_200_000_000)
        j.transition(rec.id, State.ISOLATED, t_ns=T0 + 3_500_000_000)
        j.add_event("trainjob", "stopping", attempt=0, step=70, t_ns=T0 + 4 * 10**9)
        j.add_event("trainjob", "stopped", attempt=0, t_ns=T0 + 4_500_000_000)
        j.add_event("trainjob", "launched", attempt=1, t_ns=T0 + 5 * 10**9)
        j.add_event("trainjob", "first_step", attempt=1, step=60, t_ns=T0 + 6 * 10**9)


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    topo = rail_optimized(4, 4)
    topo.save(tmp / "topo.json")
    _write_trace(tmp / "trace.jsonl", topo)
    _journal(tmp / "journal.db")
    out = tmp / "report.html"
    res = CliRunner().invoke(build_app(), [
        "report", "--html", str(out), "--trace", str(tmp / "trace.jsonl"),
        "--topology", str(tmp / "topo.json"), "--journal", str(tmp / "journal.db")])
    assert res.exit_code == 0, res.output
    return tmp, out


def test_a_journal_that_is_not_there_is_named(offline):
    tmp, _ = offline
    res = CliRunner().invoke(build_app(), [
        "report", "--html", str(tmp / "other.html"), "--trace", str(tmp / "trace.jsonl"),
        "--journal", str(tmp / "missing.db")])
    assert res.exit_code == 2, res.output
    assert "no recovery journal at" in res.output and "missing.db" in res.output
    assert not (tmp / "other.html").exists()


def test_lateness_is_skew_from_the_call_median():
    n = 4
    cols = Columns({
        "rank": np.arange(n, dtype=np.int32), "pg": np.zeros(n, np.uint32),
        "seq": np.zeros(n, np.int64), "op": np.zeros(n, np.uint32),
        "nbytes": np.zeros(n, np.int64), "dtype": np.zeros(n, np.uint32),
        "t_enter_ns": np.array([100, 200, 300, 10_300], np.int64),
        "t_start_ns": np.full(n, -1, np.int64), "t_end_ns": np.full(n, -1, np.int64),
        "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32)}, ["pg"])
    t, rank, skew = lateness(cols)
    assert rank.tolist() == [0, 1, 2, 3]
    assert np.allclose(skew * 1e6, [-150, -50, 50, 10_050])   # median 250 ns
    assert set(t.tolist()) == {250}


def test_offline_page_is_self_contained_and_names_what_it_found(offline):
    tmp, out = offline
    page = out.read_text()
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "remote resource"
    assert page.count("<svg") >= 4           # timeline, heatmap, matrix, topology
    assert f"rank {LATE}," in page            # the heatmap's caption names the late rank
    assert f"Slowest connection: {SLOW[0]} -&gt; {SLOW[1]}" in page
    assert "from conn samples" in page
    assert "recovery 1: node001" in page
    data = from_trace(tmp / "trace.jsonl")
    assert data.job == "trainjob" and len(data.ops) == RANKS * STEPS


def test_from_daemon_derives_the_matrix_from_p2p_ops(tmp_path):
    d = Daemon(DaemonConfig(listen="127.0.0.1:0", store="memory://"))
    d.start()
    try:
        with DaemonClient(f"127.0.0.1:{d.port}") as c:
            seq = 0
            for r in range(4):
                seq += 1
                c.send(c4_pb2.IngestRequest(sidecar="t", seq=seq, rank=c4_pb2.RankInfo(
                    job="live", rank=r, world_size=4, host=f"node00{r // 2}")))
            for r in range(4):
                # 40 all_reduces (rank 2 enters 3 ms late), then 40 sends to the next rank
                # (rank 1's take 8 ms, the others 0.5 ms)
                n = 40
                s = np.arange(n, dtype=np.int64)
                enter = T0 + s * 10**7 + (3_000_000 if r == 2 else 0)
                send_enter = T0 + s * 10**7 + 5_000_000
                coll = Columns({
                    "rank": np.full(2 * n, r, np.int32), "pg": np.zeros(2 * n, np.uint32),
                    "seq": np.concatenate([s, s]),
                    "op": np.repeat(np.array([1, 3], np.uint32), n),
                    "nbytes": np.full(2 * n, 1 << 20, np.int64),
                    "dtype": np.full(2 * n, 2, np.uint32),
                    "t_enter_ns": np.concatenate([enter, send_enter]),
                    "t_start_ns": np.full(2 * n, -1, np.int64),
                    "t_end_ns": np.concatenate([enter + 1_000_000, send_enter + (
                        8_000_000 if r == 1 else 500_000)]),
                    "status": np.zeros(2 * n, np.uint8),
                    "peer": np.repeat(np.array([-1, (r + 1) % 4], np.int32), n)},
                    ["0", "all_reduce", "float32", "send"])
                seq += 1
                c.send(c4_pb2.IngestRequest(sidecar="t", seq=seq, ops=encode_ops("live", coll)))
        out = tmp_path / "live.html"
        res = CliRunner().invoke(build_app(), ["report", "live", "--html", str(out),
                                               "--daemon", f"127.0.0.1:{d.port}"])
        assert res.exit_code == 0, res.output
        page = out.read_text()
        assert "derived from the durations of point-to-point calls" in page
        assert "Slowest connection: 1 -&gt; 2" in page
        assert "Latest on average: rank 2," in page
        missing = CliRunner().invoke(build_app(), ["report", "nojob", "--html",
                                                   str(tmp_path / "x.html"), "--daemon",
                                                   f"127.0.0.1:{d.port}"])
        assert missing.exit_code == 2 and "nojob" in missing.output
    finally:
        d.stop()


def test_renders_in_headless_chromium(offline, tmp_path):
    _, out = offline
    shot = tmp_path / "report.png"
    screenshot(out, shot)
    shutil.copy(shot, out.parent / "report.png")   # kept beside the page for a look


def test_a_long_stall_is_shaded_and_not_clipped():
    """A 20 s stall among 100 µs skews: the colour scale reaches it (log beyond the usual) and
    the hang report's span is drawn over the gap it leaves."""
    from c4.report import FaultReport, Suspect
    from diagnosis.report_html.plots import lateness_heatmap

    calls, ranks = 200, 4
    seq = np.repeat(np.arange(calls), ranks)
    rank = np.tile(np.arange(ranks), calls)
    t = T0 + seq * 10_000_000 + np.where(seq >= 100, 20 * 10**9, 0)
    enter = t + rank * 100_000
    enter[(seq == 100) & (rank == 3)] -= 20 * 10**9 - 1       # rank 3 waited 20 s in call 100
    cols = _one_group_calls(rank, seq, enter)
    hang = FaultReport("noncomm_hang", (Suspect("rank", "0", 0.9, rank=0),),
                       T0 + 100 * 10_000_000, "rank 0 stalled", id="h", state="resolved",
                       last_seen_ns=T0 + 100 * 10_000_000 + 20 * 10**9)
    svg, caption = lateness_heatmap(cols, [hang])
    assert "Shaded: the spans of 1 fault report(s)" in caption
    assert re.search(r"to 2e\+04 ms", caption), caption
    assert "noncomm_hang" in svg
    # four ranks: each named at the middle of its row, not 0.5-steps of a continuous axis
    y_axis = svg[svg.index('id="matplotlib.axis_2"'):]
    ticks = re.findall(r"<text[^>]*>\s*([0-9.]+)\s*</text>", y_axis[:y_axis.index("rank</text>")])
    assert {"0", "1", "2", "3"} <= set(ticks) and "0.5" not in ticks and "2.5" not in ticks, ticks
    red = re.findall(r'<text[^>]*fill: #d7191c[^>]*>\s*([^<\s]+)', y_axis)
    assert red == ["0"], red                          # the hang's suspect, rank 0


def test_the_timeline_names_each_faults_suspect_with_its_kind():
    from c4.report import FaultReport, Suspect
    from diagnosis.report_html.data import ReportData
    from diagnosis.report_html.plots import timeline_figure

    hang = FaultReport("noncomm_hang", (Suspect("rank", "1", 0.9, rank=1),), T0, "rank 1",
                       id="h", last_seen_ns=T0 + 10**9)
    svg, _ = timeline_figure(ReportData("j", "trace t", Columns({}, []), None, [hang]))
    assert "noncomm_hang: rank 1" in svg and "seconds since the first event" in svg


def test_a_scale_without_outliers_is_said_to_be_linear():
    from diagnosis.report_html.plots import lateness_heatmap

    calls, ranks = 50, 4
    seq = np.repeat(np.arange(calls), ranks)
    rank = np.tile(np.arange(ranks), calls)
    enter = T0 + seq * 10_000_000 + rank * 1_000_000        # every skew -1.5 .. +1.5 ms
    cols = _one_group_calls(rank, seq, enter)
    _, caption = lateness_heatmap(cols)
    assert "(linear to 1.5 ms; grey: no call)" in caption, caption


def _one_group_calls(rank: np.ndarray, seq: np.ndarray, enter: np.ndarray) -> Columns:
    """Op columns of calls of one group, each 1 us long."""
    n = len(seq)
    return Columns({
        "rank": rank.astype(np.int32), "pg": np.zeros(n, np.uint32), "seq": seq,
        "op": np.zeros(n, np.uint32), "nbytes": np.zeros(n, np.int64),
        "dtype": np.zeros(n, np.uint32), "t_enter_ns": enter.astype(np.int64),
        "t_start_ns": np.full(n, -1, np.int64), "t_end_ns": enter.astype(np.int64) + 1000,
        "status": np.zeros(n, np.uint8), "peer": np.full(n, -1, np.int32)}, ["pg"])
