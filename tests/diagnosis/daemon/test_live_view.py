"""The live view follows the newest attempt of a job: a restarted job's earlier processes
stopped on purpose, and their silence must not be diagnosed."""

from __future__ import annotations

import numpy as np
import pytest

from c4.proto.codec import OP_COLUMNS, Columns
from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.live import LiveView
from diagnosis.store import OpRows, RankRecord, Write, open_store
from diagnosis.store.api import GroupRecord


def _rank(attempt: int, rank: int) -> Write:
    return Write("s", attempt * 100 + rank, RankRecord("job", attempt, rank, 2, f"n{rank}"))


def test_a_new_attempt_replaces_the_old_one():
    live = LiveView(FaultHub(open_store("memory://")))
    live.apply([_rank(0, 0), _rank(0, 1)])
    live.drain()
    assert set(live._jobs) == {("job", 0)}
    live.apply([_rank(1, 0)])
    live.drain()
    assert set(live._jobs) == {("job", 1)}
    # late records of the old attempt are stored, but not analysed any more
    live.apply([Write("s", 999, GroupRecord("job", 0, "0", (0, 1)))])
    live.drain()
    assert set(live._jobs) == {("job", 1)}
    assert live._jobs[("job", 1)].groups == {}


def test_jobs_are_independent():
    live = LiveView(FaultHub(open_store("memory://")))
    live.apply([_rank(0, 0), Write("s", 7, RankRecord("other", 3, 0, 1, "n0"))])
    live.drain()
    assert set(live._jobs) == {("job", 0), ("other", 3)}


@pytest.mark.parametrize("form", ["per rank", "columns"])
def test_collector_heartbeats_reach_the_engine_of_their_attempt_only(form):
    from c4.proto import c4_pb2
    from c4.proto.codec import collector_columns

    def stats(*entries):
        if form == "per rank":
            return c4_pb2.SidecarStats(host="n1", collectors=entries)
        return c4_pb2.SidecarStats(host="n1", collector_columns=collector_columns(entries))

    live = LiveView(FaultHub(open_store("memory://")))
    live.apply([_rank(0, 0), _rank(0, 1)])
    live.drain()
    engine = live._jobs[("job", 0)].engine
    t = 1_800_000_000_000_000_000
    live.heard(stats(
        c4_pb2.CollectorStats(job="job", attempt=0, rank=1, t_ns=t),
        c4_pb2.CollectorStats(job="job", attempt=0, rank=1, t_ns=t - 5),   # older copy
        c4_pb2.CollectorStats(job="job", attempt=0, rank=500_000, t_ns=t),  # never registered
        c4_pb2.CollectorStats(job="job", attempt=3, rank=0, t_ns=t),        # no such attempt
        c4_pb2.CollectorStats(job="job", attempt=0, rank=0)))              # old collector: no time
    live.analyze(now_ns=t)
    assert engine.clock.seen[1] == t
    assert len(engine.clock.seen) < 1000   # a stray rank id did not size the arrays
    assert engine.clock.seen[0] < t
    assert not live._heartbeats.take()     # applied once, not kept
    assert not engine.leaving
    live.heard(stats(
        c4_pb2.CollectorStats(job="job", attempt=0, rank=0, t_ns=t + 1, leaving=True)))
    live.analyze(now_ns=t + 1)
    assert engine.leaving == {0} and engine.clock.seen[0] == t + 1


def test_a_jobs_slow_detectors_run_at_every_pass_of_the_views_interval():
    from diagnosis.engine import EngineConfig

    for interval_s in (1.0, 2.0):
        live = LiveView(FaultHub(open_store("memory://")), interval_s=interval_s)
        live.apply([_rank(0, 0)])
        live.drain()
        cfg = live._jobs[("job", 0)].engine.cfg
        assert cfg == EngineConfig.analysed_every(interval_s)
        assert 0.5 * interval_s * 1e9 < cfg.detect_every_ns < interval_s * 1e9


def _calls_of(rank: int, calls: int) -> Columns:
    """Rank ``rank``'s rows of ``calls`` all-reduces of group "g", 10 ms apart."""
    seq = np.arange(calls)
    t = 1_800_000_000_000_000_000 + seq * 10_000_000 + rank * 1_000
    cols = {"rank": np.full(calls, rank), "pg": np.zeros(calls), "seq": seq,
            "op": np.ones(calls), "nbytes": np.full(calls, 1024), "dtype": np.full(calls, 2),
            "t_enter_ns": t, "t_start_ns": np.full(calls, -1), "t_end_ns": t + 5_000_000,
            "status": np.zeros(calls), "peer": np.full(calls, -1)}
    return Columns({k: np.asarray(v, dtype=OP_COLUMNS[k]) for k, v in cols.items()},
                   ["g", "all_reduce", ""])


def test_many_sidecars_batches_are_applied_in_time_order():
    """Two nodes' batches of the same 150 calls, applied as one run: in arrival order the
    engine took the first node's calls 64 on into the slots of its calls 0-63 before the
    second node's rows of them came, and those calls were lost."""
    live = LiveView(FaultHub(open_store("memory://")))
    live.apply([_rank(0, 0), _rank(0, 1), Write("s", 50, GroupRecord("job", 0, "g", (0, 1)))])
    live.drain()
    live.apply([Write(f"node{r}", 60 + r, OpRows("job", 0, _calls_of(r, 150)))
                for r in (0, 1)])
    live.drain()
    engine = live._jobs[("job", 0)].engine
    assert engine.arena.stale_rows == 0
    assert int(engine.timing.count.sum()) == 150
