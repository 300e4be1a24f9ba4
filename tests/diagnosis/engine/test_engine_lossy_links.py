"""Localizing a lossy link from retransmission counts (engine/lossy.py) on hand-built samples:
six hosts of one rank each, two per leaf, two spines (ECMP between leaves); every rank sends to
every other host once a second, as a sidecar's socket samples turn into transfers."""

from __future__ import annotations

import numpy as np

from c4.topology.builders import rail_optimized
from diagnosis.engine import Engine
from diagnosis.engine.records import ConnRecords

S = 1_000_000_000
T0 = 1_000 * S
CABLE = {("nic", "node003/nic0"), ("link", "leaf01r0~node003/nic0")}


def run(lossy_rank: int | None, seconds: int = 40, lossy: tuple[tuple[int, int], ...] = ((10, 40),),
        seed: int = 0, window_s: int = 1, short_from: int | None = None) -> Engine:
    """Samples with background retransmissions (a few, in bursts); during the ``lossy``
    intervals (seconds) every connection to or from ``lossy_rank`` retransmits ~5 % of its
    ~600 segments a second. ``window_s`` > 1: one sample per connection and window, as the
    ``linkstat`` of a job whose windows were lengthened; from ``short_from`` (seconds) on,
    1 s windows again."""
    rng = np.random.default_rng(seed)
    eng = Engine(rail_optimized(6, 1, hosts_per_leaf=2, spines=2))
    for r in range(6):
        eng.add_rank(r, f"node00{r}", f"node00{r}/gpu0", f"node00{r}/nic0")
    pairs = [(s, d) for s in range(6) for d in range(6) if s != d]
    src = np.array([p[0] for p in pairs])
    dst = np.array([p[1] for p in pairs])
    t, full = 0, window_s
    while t < seconds:
        window_s = 1 if short_from is not None and t >= short_from else full
        t += window_s
        end = T0 + t * S
        retrans = rng.poisson(0.2 * window_s, len(pairs))
        retrans[rng.random(len(pairs)) < 0.01] += 20      # an occasional burst of tail drops
        if lossy_rank is not None and any(a <= t < b for a, b in lossy):
            on = (src == lossy_rank) | (dst == lossy_rank)
            retrans[on] += rng.poisson(30 * window_s, int(on.sum()))
        span = 300_000_000 if window_s == 1 else window_s * S
        eng.add_conns(ConnRecords.build(src, dst, np.full(len(pairs), 40 << 20),
                                        np.full(len(pairs), end - span),
                                        np.full(len(pairs), end), retrans=retrans))
        if t % 2 == 0 or window_s > 1:
            eng.advance(end)
    eng.advance(T0 + t * S)
    return eng


def lossy_reports(eng: Engine, state: str = "open") -> list:
    return [r for r in eng.reports() if r.id.startswith("comm_slow:lossy:") and r.state == state]


def test_lossy_cable_is_named_by_its_retransmissions():
    eng = run(lossy_rank=3)
    [report] = lossy_reports(eng)
    assert report.kind == "comm_slow"
    top = max(s.score for s in report.suspects)
    assert {(s.type, s.id) for s in report.suspects if s.score == top} == CABLE
    assert report.suspects[0].type == "nic"   # the NIC and its cable: nic first
    assert "retransmit" in report.summary and "packet loss" in report.summary
    ev = report.evidence
    assert ev["lossy_count"] == 10          # 3 to and from each of five other hosts
    assert all("3" in name.split(">") for name in ev["lossy"])
    # a clean connection with a burst of tail drops in the window counts as neither
    assert min(ev["retrans"].values()) >= 50 and 15 <= ev["clean"] <= 20
    assert report.first_seen_ns >= T0 + 9 * S
    # updated, not filed again, while the loss goes on
    assert report.revision >= 0 and len(eng.reports()) == len(
        {r.id for r in eng.reports()})


def test_healthy_run_with_background_retransmissions_files_nothing():
    for seed in range(3):
        assert not [r for r in run(lossy_rank=None, seed=seed).reports()
                    if r.id.startswith("comm_slow:lossy:")]
        assert not [r for r in run(lossy_rank=None, seed=seed, seconds=320,
                                   window_s=16).reports()
                    if r.id.startswith("comm_slow:lossy:")]


def test_lossy_cable_is_named_from_long_statistics_windows():
    # 16 s windows (a large job's linkstat): the verdict's samples need a window longer than
    # the configured 20 s, which holds at most two of them
    eng = run(lossy_rank=3, seconds=320, lossy=((32, 320),), window_s=16)
    [report] = lossy_reports(eng)
    assert {(s.type, s.id) for s in report.suspects[:2]} == CABLE
    assert report.evidence["window_s"] == 64
    assert report.first_seen_ns <= T0 + (32 + 4 * 16) * S


def test_the_window_shortens_again_with_the_statistics_windows():
    # 16 s windows, then 1 s ones for good: once the long samples have left it, the window
    # is the configured 20 s again, not four of the longest samples ever seen
    eng = run(lossy_rank=3, seconds=320, lossy=((260, 320),), window_s=16, short_from=160)
    [report] = lossy_reports(eng)
    assert report.evidence["window_s"] == 20
    assert {(s.type, s.id) for s in report.suspects[:2]} == CABLE


def test_report_withdrawn_when_the_loss_stops_and_a_new_episode_is_a_new_report():
    eng = run(lossy_rank=3, seconds=60, lossy=((5, 25),))
    [old] = lossy_reports(eng, "resolved")
    assert not lossy_reports(eng)
    eng = run(lossy_rank=3, seconds=110, lossy=((5, 25), (60, 110)))
    [new] = lossy_reports(eng)
    assert [r.id for r in lossy_reports(eng, "resolved")] == [old.id]
    assert new.id != old.id and new.id.startswith(old.id)
    assert {(s.type, s.id) for s in new.suspects[:2]} == CABLE


def test_ecmp_loss_between_leaves_names_the_uplinks_not_the_hosts():
    # 0>2 and 1>3 cross from leaf00 to leaf01 over either spine (ECMP: no recorded path) and
    # lose; 0>1 and 2>3 inside the leaves and 0>3, 1>2 across stay clean. Clean traffic clears
    # only what it surely crosses (NICs, cables, leaves), never one spine's uplinks: what is
    # left are the components on some cross-leaf path, all equally likely.
    eng = Engine(rail_optimized(4, 1, hosts_per_leaf=2, spines=2))
    for r in range(4):
        eng.add_rank(r, f"node00{r}", f"node00{r}/gpu0", f"node00{r}/nic0")
    rng = np.random.default_rng(2)
    flows = [(0, 2), (1, 3), (0, 1), (1, 0), (2, 3), (3, 2), (0, 3), (1, 2)]
    n = len(flows)
    for t in range(40):
        end = T0 + t * S
        retrans = [int(rng.poisson(40 if (s, d) in ((0, 2), (1, 3)) else 0.2)) for s, d in flows]
        eng.add_conns(ConnRecords.build([f[0] for f in flows], [f[1] for f in flows],
                                        [1 << 20] * n, [end - S // 4] * n, [end] * n,
                                        retrans=retrans))
        eng.advance(end)
    [report] = lossy_reports(eng)
    assert sorted(report.evidence["lossy"]) == ["0>2", "1>3"]
    named = {(s.type, s.id) for s in report.suspects}
    assert ("link", "leaf00r0~spine00") in named and ("link", "leaf01r0~spine01") in named
    assert not {t for t, _ in named} & {"nic"}
    assert not {i for _, i in named} & {"leaf00r0", "leaf01r0"}
def test_rows_without_retransmission_counts_are_ignored():
    eng = Engine(rail_optimized(6, 1, hosts_per_leaf=2, spines=2))
    for t in range(30):
        eng.add_conns(ConnRecords.build([0, 3], [3, 0], [1 << 20] * 2, [T0 + t * S] * 2,
                                        [T0 + t * S + 1000] * 2))
        eng.advance(T0 + t * S)
    assert len(eng.lossy.src) == 0 and not eng.reports()


def test_the_window_holds_its_samples_only_though_old_batches_are_dropped_late():
    """One batch per host and second, as each node's sidecar sends them, with no analysis pass
    between: the batches past the window are dropped in bulk, a while late, yet what is judged
    is exactly the samples of the last ``lossy_window_ns``."""
    eng = Engine(rail_optimized(6, 1, hosts_per_leaf=2, spines=2))
    for r in range(6):
        eng.add_rank(r, f"node00{r}", f"node00{r}/gpu0", f"node00{r}/nic0")
    seconds = 45
    for t in range(1, seconds + 1):
        end = T0 + t * S
        for src in range(6):
            dst = np.array([d for d in range(6) if d != src])
            eng.add_conns(ConnRecords.build(np.full(5, src), dst, np.full(5, 40 << 20),
                                            np.full(5, end - S // 2), np.full(5, end),
                                            retrans=np.ones(5, dtype=np.int64)))
    window_s = eng.cfg.lossy_window_ns // S
    # batches older than the window are still held ...
    assert len(eng.lossy._chunks) > 6 * window_s
    # ... but the window judged holds the last window_s seconds' samples, every one of them
    win = eng.lossy._window()
    assert sorted(set(((win.end - T0) // S).tolist())) == \
        list(range(seconds - window_s + 1, seconds + 1))
    assert len(win.key) == 30 * window_s
