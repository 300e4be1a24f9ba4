"""The daemon's garbage collector policy (diagnosis/daemon/heap.py), on the process's real
collector: what survives a full collection that freed little is frozen, so later ones skip it;
cyclic garbage among frozen objects is freed once thawed (a job leaving, or every thaw_s)."""

from __future__ import annotations

import gc
import weakref

import pytest

from diagnosis.daemon.faults import FaultHub
from diagnosis.daemon.heap import HeapConfig, HeapKeeper
from diagnosis.daemon.live import LiveView
from diagnosis.store import RankRecord, Write, open_store


class _Node:
    other: object = None


@pytest.fixture
def collector_off():
    # no automatic collection between a test's steps: each collection is the test's own
    was = gc.isenabled()
    gc.disable()
    gc.collect()    # the garbage earlier tests in this process left (a collection freeing it
    yield           # would freeze nothing)
    gc.unfreeze()
    if was:
        gc.enable()


def test_the_survivors_of_a_full_collection_that_freed_little_are_frozen(collector_off):
    keeper = HeapKeeper(HeapConfig(min_pause_s=0.0))
    try:
        state = [{"rank": i} for i in range(50_000)]
        gc.collect()
        assert gc.get_freeze_count() == 0          # frozen between passes, not inside gc
        keeper.maintain()
        assert keeper.freezes == 1
        assert gc.get_freeze_count() >= len(state)
        assert keeper.collections[2] >= 1 and keeper.seconds[2] > 0
    finally:
        keeper.close()
    assert gc.get_freeze_count() == 0


def test_a_full_collection_that_freed_much_freezes_nothing(collector_off):
    keeper = HeapKeeper(HeapConfig(min_pause_s=0.0, freeze_below=1_000))
    try:
        for _ in range(5_000):
            n = _Node()
            n.other = n
        del n
        gc.collect()
        keeper.maintain()
        assert keeper.freezes == 0 and gc.get_freeze_count() == 0
    finally:
        keeper.close()


def test_cyclic_garbage_among_frozen_objects_is_freed_once_thawed(collector_off):
    keeper = HeapKeeper(HeapConfig(min_pause_s=0.0))
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        gc.collect()
        keeper.maintain()
        del a, b
        gc.collect()
        assert ref() is not None       # frozen: the collection skipped it
        keeper.thaw()
        keeper.maintain()
        assert keeper.thaws == 1 and gc.get_freeze_count() == 0
        gc.collect()
        assert ref() is None
    finally:
        keeper.close()


def test_everything_is_thawed_every_thaw_s(collector_off):
    now = [0.0]
    keeper = HeapKeeper(HeapConfig(min_pause_s=0.0, thaw_s=600.0), clock=lambda: now[0])
    try:
        gc.collect()
        keeper.maintain()
        assert gc.get_freeze_count() > 0
        now[0] = 599.0
        keeper.maintain()
        assert gc.get_freeze_count() > 0
        now[0] = 600.0
        keeper.maintain()
        assert gc.get_freeze_count() == 0 and keeper.thaws == 1
    finally:
        keeper.close()


def test_a_job_removed_from_the_live_view_thaws_the_heap(collector_off):
    keeper = HeapKeeper(HeapConfig(min_pause_s=0.0))
    try:
        live = LiveView(FaultHub(open_store("memory://")), heap=keeper)
        live.apply([Write("s", 1, RankRecord("job", 0, 0, 1, "n0"))])
        live.drain()
        gc.collect()
        keeper.maintain()
        assert gc.get_freeze_count() > 0
        assert live.remove("job") == 1
        keeper.maintain()
        assert gc.get_freeze_count() == 0
    finally:
        keeper.close()
