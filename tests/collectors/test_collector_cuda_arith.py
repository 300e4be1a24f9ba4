"""CUDA-event timing arithmetic, with stand-in events: this machine has no GPU, so this checks
only the bookkeeping (pending rows, conversion to wall clock), never real CUDA behaviour."""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace
from typing import Any

import pytest

from collectors.buffer import T_END, T_ENTER, T_START, RecordBuffer
from collectors.completion import OK, Completion
from collectors.cuda_timing import CudaTimer


class FakeGpu:
    """A GPU clock in ms that the test advances; events complete when the test says so."""

    def __init__(self) -> None:
        self.now_ms = 1000.0
        self.done_up_to_ms = float("inf")

    def torch(self) -> SimpleNamespace:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.t: float | None = None

            def record(self) -> None:
                self.t = gpu.now_ms

            def query(self) -> bool:
                return self.t is not None and self.t <= gpu.done_up_to_ms

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: Event) -> float:
                return other.t - self.t

        cuda = SimpleNamespace(Event=Event, current_device=lambda: 0,
                               device=lambda _d: contextlib.nullcontext(),
                               Stream=object, stream=lambda _s: contextlib.nullcontext())
        return SimpleNamespace(cuda=cuda)


def _timed() -> tuple[FakeGpu, RecordBuffer, CudaTimer, Any]:
    """A stand-in GPU, the buffer rows go to, the timer and its invoke wrapper."""
    gpu = FakeGpu()
    buf = RecordBuffer(capacity=16)
    rec = SimpleNamespace(buf=buf, _tls=SimpleNamespace(busy=False), done=Completion(buf))
    timer = CudaTimer(gpu.torch())
    return gpu, buf, timer, timer.make_invoke(rec, wall_invoke=None)


def test_sync_call_becomes_a_row_with_gpu_times_once_its_end_event_completes():
    gpu, buf, timer, invoke = _timed()

    def collective() -> str:
        gpu.now_ms += 5.0  # the GPU work of the call: 5 ms on the stream
        return "result"

    row = (0, 7, 1, 64, 2, time.time_ns(), -1, -1, OK, -1)
    gpu.done_up_to_ms = 0.0  # nothing has run on the GPU yet
    assert invoke(collective, (), {}, row, 42, False, None, False) == "result"
    assert buf.pending == {42: row}
    timer.poll()
    assert not buf.rows and 42 in buf.pending  # still running: not a row yet
    gpu.done_up_to_ms = float("inf")
    gpu.now_ms += 3.0  # the anchor is recorded 3 ms after the call's end
    timer.poll()
    assert not buf.pending
    (got,) = buf.take(10)
    assert got[:5] == row[:5] and got[8:] == row[8:]
    anchor_wall_ns = timer._anchors[0][1]
    assert (got[T_START], got[T_END]) == (anchor_wall_ns - 8_000_000, anchor_wall_ns - 3_000_000)
    # the rank arrived when its stream reached the call, after its CPU had entered it
    assert got[T_ENTER] == max(row[T_ENTER], got[T_START])


def test_a_call_queued_on_the_stream_arrives_when_the_stream_reaches_it():
    # the CPU entered the call 1 s before the stream got to it (it ran ahead of the GPU): the
    # row's entry is the stream's start, so that a late GPU, not its eager CPU, shows as late
    gpu, buf, timer, invoke = _timed()
    cpu_enter = time.time_ns() - 1_000_000_000
    row = (0, 7, 1, 64, 2, cpu_enter, -1, -1, OK, -1)

    def collective() -> None:
        gpu.now_ms += 5.0

    invoke(collective, (), {}, row, 1, False, None, False)
    timer.poll()
    (got,) = buf.take(10)
    assert got[T_ENTER] == got[T_START] > cpu_enter + 900_000_000


def test_a_call_queued_behind_a_stuck_stream_is_not_reported_open():
    # the stream is stuck in call 1 (a peer never came) and the CPU went on to queue call 2:
    # the rank waits in call 1 only, so call 2 is not open until the stream reaches it
    gpu, buf, timer, invoke = _timed()
    cpu_enter = time.time_ns() - 1_000_000_000

    def collective() -> None:
        gpu.now_ms += 5.0

    gpu.done_up_to_ms = gpu.now_ms  # the stream reaches call 1's start, no further
    for token in (1, 2):
        invoke(collective, (), {}, (0, 7, 1, 64, token, cpu_enter, -1, -1, OK, -1), token,
               False, None, False)
    timer.poll()
    rows, tokens = buf.open_rows(1 << 62, set())
    assert tokens == [1] and not buf.rows
    # an open call's entry is the stream's arrival too, not the CPU's
    (open1,) = rows
    assert open1[T_ENTER] > cpu_enter + 900_000_000 and open1[T_END] == -1
    gpu.done_up_to_ms = gpu.now_ms - 3.0  # call 1 ends; the stream is inside call 2
    timer.poll()
    (done1,) = buf.take(10)
    assert done1[4] == 1 and done1[T_END] > 0
    assert buf.open_rows(1 << 62, {1})[1] == [2]


def test_a_call_that_raises_leaves_nothing_pending_or_queued():
    gpu, buf, timer, invoke = _timed()
    gpu.done_up_to_ms = 0.0

    def failing() -> None:
        raise RuntimeError("NCCL communicator was aborted")

    with pytest.raises(RuntimeError, match="aborted"):
        invoke(failing, (), {}, (0, 7, 1, 64, 2, time.time_ns(), -1, -1, OK, -1), 5, False,
               None, False)
    gpu.done_up_to_ms = float("inf")
    timer.poll()
    assert not buf.pending and not buf.queued
    (row,) = buf.take(10)
    assert row[8] != OK and row[T_END] > 0


def test_events_whose_times_were_read_are_reused():
    # creating and destroying two CUDA events per call was a large part of the hook's cost
    _gpu, buf, timer, invoke = _timed()
    made = []
    event_cls = timer._torch.cuda.Event

    def counted(enable_timing: bool = False):
        made.append(1)
        return event_cls(enable_timing)

    timer._torch.cuda.Event = counted
    rows = 0
    for i in range(100):
        row = (0, 7, 1, 64, 2, time.time_ns(), -1, -1, OK, -1)
        invoke(lambda: None, (), {}, row, i, False, None, False)
        timer.poll()
        rows += len(buf.take(10))
    assert rows == 100
    assert len(made) == 3      # one call's two, and the clock anchor
