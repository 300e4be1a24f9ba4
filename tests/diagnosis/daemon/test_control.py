"""The schedules a ControlHub keeps (diagnosis/daemon/control.py): those of jobs an open stream
carries, always; of jobs no stream carries, the newest few, for sidecars that come back."""

from __future__ import annotations

import pytest

from c4.proto import c4_pb2
from diagnosis.daemon import control
from diagnosis.daemon.control import ControlHub


def _rank(job: str) -> c4_pb2.IngestRequest:
    return c4_pb2.IngestRequest(rank=c4_pb2.RankInfo(job=job, rank=0, host="node0"))


def _carry(hub: ControlHub, job: str, got: list) -> int:
    sid = hub.open(got.append)
    hub.seen(sid, _rank(job))
    return sid


def test_a_job_whose_streams_closed_keeps_its_schedule_among_the_newest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "MAX_IDLE_SCHEDULES", 2)
    hub = ControlHub()
    got: list = []
    live = _carry(hub, "live", got)
    hub.publish(c4_pb2.SampleSchedule(job="live", version=1))
    # four jobs come and go, each with its schedule
    for k in range(4):
        sid = _carry(hub, f"gone{k}", got)
        hub.publish(c4_pb2.SampleSchedule(job=f"gone{k}", version=10 + k))
        hub.close(sid)
    # the two newest of the jobs nobody carries are kept; the job still carried is kept however
    # long ago its schedule came
    assert [hub.schedule(f"gone{k}", 0) is not None for k in range(4)] == \
        [False, False, True, True]
    assert hub.schedule("live", 0).version == 1
    # a sidecar of a kept job that comes back gets its schedule at once, and the job is no
    # longer idle: more jobs leaving do not take its schedule
    back = _carry(hub, "gone3", got)
    assert got[-1].control.schedule.version == 13
    for k in range(4, 7):
        sid = _carry(hub, f"gone{k}", got)
        hub.publish(c4_pb2.SampleSchedule(job=f"gone{k}", version=10 + k))
        hub.close(sid)
    assert hub.schedule("gone3", 0).version == 13
    assert hub.schedule("gone4", 0) is None
    # one of a forgotten job's sidecars coming back gets no schedule (the daemon's next one
    # reaches it)
    before = len(got)
    _carry(hub, "gone0", got)
    assert len(got) == before
    hub.close(back)
    hub.close(live)


def test_a_schedule_published_for_a_job_nobody_carries_is_kept_as_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "MAX_IDLE_SCHEDULES", 1)
    hub = ControlHub()
    hub.publish(c4_pb2.SampleSchedule(job="a", version=1))
    hub.publish(c4_pb2.SampleSchedule(job="b", version=2))
    assert hub.schedule("a", 0) is None and hub.schedule("b", 0).version == 2
    hub.forget("b", 0)
    assert hub.schedule("b", 0) is None
