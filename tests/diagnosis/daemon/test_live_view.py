"""The live view follows the newest attempt of a job: a restarted job's earlier processes
stopped on purpose, and their silence must not be diagnosed."""

from __future__ import annotations

from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.live import LiveView
from diagnosis.store import RankRecord, Write, open_store
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
