"""The parts the engine reads reduced telemetry with, on hand-built records: progress written into
the arena, window statistics as connection evidence, port states weighing suspects, and the
sampling schedule."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto.sampling import is_sampled
from c4.report import Suspect
from diagnosis.engine import Engine
from diagnosis.engine.arena import Arena
from diagnosis.engine.config import EngineConfig
from diagnosis.engine.conns import ConnWindow
from diagnosis.engine.linkstats import LinkStatFeed
from diagnosis.engine.ports import PortBoard
from diagnosis.engine.progress import ProgressBoard
from diagnosis.engine.records import LinkStatRecords, PortRecords, ProgressRecords
from diagnosis.engine.straggle import _Rings

S = 1_000_000_000


def board(n: int = 4) -> tuple[Arena, ProgressBoard, int]:
    arena = Arena(8)
    g = arena.add_group(0, "dp", np.arange(n))
    return arena, ProgressBoard(arena), g


def update(b: ProgressBoard, g: int, rows: list[tuple[int, int, int, int]]) -> None:
    """rows: (member, entered, completed, t)."""
    pos, ent, comp, t = (np.asarray(x) for x in zip(*rows, strict=True))
    b.update(np.full(len(rows), g), pos, ent, comp, t)


def test_a_call_some_members_are_inside_becomes_an_open_instance():
    arena, b, g = board()
    update(b, g, [(0, 7, 6, 1 * S), (1, 7, 6, 1 * S), (2, 6, 6, 1 * S), (3, 7, 7, 1 * S)])
    groups, seqs = b.pending(np.full(4, g), np.arange(4))
    assert sorted(set(zip(groups.tolist(), seqs.tolist()))) == [(g, 7)]
    b.write(groups, seqs)
    slot = g * arena.W + 7 % arena.W
    cells = slice(arena.base[g] + (7 % arena.W) * 4, arena.base[g] + (7 % arena.W) * 4 + 4)
    assert arena.s_seq[slot] == 7 and not arena.s_closed[slot]
    # 0 and 1 wait inside, 2 never came, 3 is already out of it
    assert arena.c_enter[cells].tolist() == [S, S, -1, S]
    assert arena.c_end[cells].tolist() == [-1, -1, -1, S]
    # the absent member catches up and everyone leaves: the instance closes
    update(b, g, [(2, 9, 9, 2 * S), (0, 9, 9, 2 * S), (1, 9, 9, 2 * S)])
    b.write(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert arena.s_closed[slot]


def test_counts_only_grow_and_keep_the_earliest_time_they_were_seen():
    _, b, g = board(2)
    update(b, g, [(0, 5, 4, 3 * S), (0, 5, 4, 2 * S), (0, 3, 2, 4 * S)])
    row = b.off[g]
    assert (b.entered[row], b.completed[row], b.t_entered[row]) == (5, 4, 2 * S)


def test_pace_from_progress_counts_every_call():
    _, b, g = board(2)
    update(b, g, [(0, 0, 0, 1 * S)])
    update(b, g, [(0, 100, 100, 3 * S)])
    assert b.period(np.asarray([g]))[0] == 2 * S / 100
    assert np.isnan(b.period(np.asarray([g]), min_calls=200)[0])


def feed(win: ConnWindow) -> LinkStatFeed:
    return LinkStatFeed(win)


def test_a_window_becomes_one_sample_and_its_open_transfers():
    arena = Arena(8)
    win = ConnWindow(arena, EngineConfig())
    f = feed(win)
    recs = LinkStatRecords.build([0, 1], [1, 0], [2 * S, 2 * S], [S, S], transfers=[4, 0],
                                 nbytes=[4 << 20, 0], busy_ns=[400_000_000, 0],
                                 open_=[0, 1], open_since_ns=[None, int(1.5 * S)])
    samples = f.add(recs, np.array([-1, -1]))
    assert len(samples) == 1 and samples.bytes[0] == 1 << 20
    assert samples.t_end_ns[0] - samples.t_start_ns[0] == 100_000_000
    k10 = win.keys_of(np.array([1]), np.array([0]), np.array([-1]))[0]
    assert win.open_key.tolist() == [k10] and win.open_start.tolist() == [int(1.5 * S)]
    # (a window's transfer proves its path alive only from the window's start)
    k01 = win.keys_of(np.array([0]), np.array([1]), np.array([-1]))[0]
    assert win.last_end[k01] == S + 1
    # the next window has a record of another connection only: after a whole window without
    # one, 1 -> 0 had nothing in flight any more
    f.add(LinkStatRecords.build([0], [1], [3 * S], [S], transfers=[1], nbytes=[1], busy_ns=[1]),
          np.array([-1]))
    assert len(win.open_key) == 1
    f.add(LinkStatRecords.build([0], [1], [4 * S], [S], transfers=[1], nbytes=[1], busy_ns=[1]),
          np.array([-1]))
    assert len(win.open_key) == 0


def test_port_evidence_reorders_a_hangs_suspects():
    ports = PortBoard()
    ports.add(PortRecords.build(["h1", "h2"], ["h1/nic0", "h2/nic0"], [S, S], ["up", "up"]))
    tied = [Suspect("nic", "h1/nic0", 1.0), Suspect("nic", "h2/nic0", 1.0),
            Suspect("link", "leaf0~h2/nic0", 1.0), Suspect("gpu", "h1/gpu0", 0.3)]
    out, note = ports.weigh(tied)
    # both ports up and clean all along: the stalled sender comes first
    assert out[0].id == "h1/gpu0" and "stayed up" in note
    ports.add(PortRecords.build(["h2"], ["h2/nic0"], [2 * S], ["down"]))
    out, note = ports.weigh(tied)
    assert {s.id for s in out[:2]} == {"h2/nic0", "leaf0~h2/nic0"} and "h2/nic0" in note
    assert out[2].score <= 0.5
    assert PortBoard().weigh(tied) == (tied, "")


def test_error_counters_that_climb_make_a_port_suspect():
    ports = PortBoard()
    ports.add(PortRecords.build(["h1"] * 2, ["h1/nic0"] * 2, [S, 2 * S], ["up", "up"],
                                symbol_errors=[3, 90]))
    assert ports.errors_grew("h1/nic0") and ports.evidence("h1/nic0") > 1


def test_a_factor_per_communicator_from_an_announced_call_on():
    eng = Engine()
    eng.add_group("dp", [0, 1])
    eng.set_sample(4, pg="dp", from_seq=100)
    g = np.array([eng.arena._by_pg[eng._pg_ids["dp"]]] * 200)
    seq = np.arange(200)
    kept = eng._sampled(g, seq)
    assert kept[:100].all()
    assert kept[100:].tolist() == [is_sampled("dp", s, 4) for s in range(100, 200)]


def test_one_factor_for_every_communicator_keeps_the_calls_is_sampled_keeps():
    """The whole-trace factor goes through numpy (crc32 prefixes per communicator): the same
    calls as is_sampled, for communicators, p2p channels and seqs of any width."""
    eng = Engine()
    eng.set_sample(16)
    names = ["dp.0", "tp.12", "pp.3"]
    for name in names:
        eng.add_group(name, [0, 1, 2])
    pgs = np.array([eng._pg_ids[n] for n in names])
    chans = eng.arena.channels(pgs, np.array([0, 1, 2]), np.array([1, 2, 0]), eng.pg_names)
    groups = [eng.arena._by_pg[eng._pg_ids[n]] for n in names]
    rng = np.random.default_rng(7)
    which = rng.integers(0, 6, 3000)
    g = np.array(groups + chans.tolist())[which]
    seq = np.concatenate([np.arange(1500), rng.integers(0, 10**12, 1500)])
    want = [is_sampled(names[w % 3], s, 16) for w, s in zip(which.tolist(), seq.tolist())]
    assert eng._sampled(g, seq).tolist() == want
    assert 0 < sum(want) < len(want)


def test_progress_rows_without_a_group_are_counted_as_dropped():
    eng = Engine()
    eng.set_sample(8)
    eng.add_progress(ProgressRecords.build([0], ["nope"], [S], [3], [2]))
    assert eng.dropped == 1


def test_a_factor_that_falls_back_to_one_leaves_the_sampled_detectors():
    eng = Engine()
    eng.set_sample(16, pg="dp", from_seq=10)
    assert eng.sample == 16
    eng.set_sample(1, pg="dp", from_seq=500)
    assert eng.sample == 1


def test_heard_takes_one_time_per_rank():
    eng = Engine()
    eng.heard(np.array([0, 3]), np.array([5 * S, 7 * S]))
    assert eng.clock.seen[[0, 3]].tolist() == [5 * S, 7 * S]


class _OneBucketAtATime:
    """The straggler rings' bucketing written bucket by bucket, as the reference the batch
    version (all groups at once) must match."""

    def __init__(self, groups: int, n: int, K: int) -> None:
        self.K = K
        self.x = np.full((groups, K, n), np.nan)
        self.scale = np.full((groups, K), np.nan)
        self.t = np.zeros((groups, K), dtype=np.int64)
        self.pos = np.zeros(groups, dtype=np.int64)
        self.acc = [(np.zeros(n), 0.0, 0, -1, 0) for _ in range(groups)]  # x, scale, n, b, t

    def add(self, li, x, scale, t, bucket_ns) -> None:
        for i in np.lexsort((t, t // bucket_ns, li)).tolist():
            g, b = int(li[i]), int(t[i] // bucket_ns[i])
            ax, asc, an, ab, at = self.acc[g]
            if b < ab:
                continue
            if b > ab:
                if an:
                    col = self.pos[g] % self.K
                    self.x[g, col], self.scale[g, col], self.t[g, col] = ax / an, asc / an, at
                    self.pos[g] += 1
                ax, asc, an, ab, at = np.zeros_like(ax), 0.0, 0, b, int(t[i])
            self.acc[g] = (ax + x[i], asc + scale[i], an + 1, ab, at)


@pytest.mark.parametrize("groups", [5, 150])
def test_straggler_rings_fold_buckets_as_one_bucket_at_a_time_would(groups):
    """With 150 groups, they appear a few at a time, as a large job's do: the rings grow
    (their arrays have room to spare) and keep what the groups had."""
    rng = np.random.default_rng(3)
    n, K = 4, 6
    rings, ref = _Rings(n, K), _OneBucketAtATime(groups, n, K)
    known = min(groups, 5)
    rings.index(np.arange(known))
    bucket = rng.choice([7, 10, 25, 40], groups)
    now = 0
    for _ in range(40):
        if known < groups:
            known = min(groups, known + int(rng.integers(1, 9)))
            ids = np.r_[np.arange(known), known - 1]   # (a group twice in one batch)
            assert rings.index(ids).tolist() == ids.tolist()
        m = int(rng.integers(1, 30))
        li = rng.integers(0, known, m)
        # mostly forward in time, now and then a call of a bucket already written, and now
        # and then a jump past more than K buckets at once
        t = now + rng.integers(-30, 60, m) + (400 if rng.random() < 0.1 else 0)
        t = np.maximum(t, 0)
        now = int(t.max())
        x = rng.normal(size=(m, n))
        scale = rng.uniform(1, 2, m)
        rings.add(li, x, scale, t, bucket[li])
        ref.add(li, x, scale, t, bucket[li])
        np.testing.assert_array_equal(rings.pos, ref.pos[:known])
        np.testing.assert_allclose(rings.x, ref.x[:known].astype(np.float32), rtol=1e-6)
        np.testing.assert_allclose(rings.scale, ref.scale[:known], rtol=1e-12)
        np.testing.assert_array_equal(rings.t[:known], ref.t[:known])
    assert len(rings.pos) == groups
    assert rings.pos.max() > K          # the rings went round


def test_open_slots_follow_every_write_to_the_arena():
    """The open instances the arena keeps as rows arrive (op rows, cells from progress, newer
    calls taking a slot over) are always those some member entered and that have not
    finished."""
    rng = np.random.default_rng(5)
    arena = Arena(4)
    groups = [arena.add_group(p, f"g{p}", np.arange(p, p + 3)) for p in range(3)]
    for _ in range(60):
        n = int(rng.integers(1, 8))
        g = np.asarray(groups)[rng.integers(0, 3, n)]
        pos = rng.integers(0, 3, n)
        seq = rng.integers(0, 10, n)
        enter = rng.integers(0, 100, n) * S
        end = np.where(rng.random(n) < 0.6, enter + S, -1)
        if rng.random() < 0.5:
            arena.ingest(g, pos, seq, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                         enter, end, np.zeros(n, dtype=np.int8), np.full(n, -1))
        else:
            arena.fill(g, pos, seq, enter, end, np.full(n, -1))
        used = len(arena) * arena.W
        expect = np.flatnonzero((arena.s_entered[:used] > 0) & ~arena.s_closed[:used])
        assert arena.open_slots().tolist() == expect.tolist()
