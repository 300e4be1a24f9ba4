"""CUDA-event timing for NCCL groups. Run on a GPU by tests/gpu (one H200, then one H100; NCCL
2.28.9, four ranks on the GPU): its times match NCCL Inspector's kernel times for the same calls.

For a synchronous call on a group whose backend runs on the GPU, the hooks record a CUDA event on
the current stream before and after the call, without synchronizing. The row's ``t_start_ns`` and
``t_end_ns`` are those events' times, and its ``t_enter_ns`` the later of the CPU's entry and the
stream's start: the rank's arrival at the call (its CPU runs calls ahead of its GPU). The shipper
thread later asks ``event.query()``; once the end event has completed, start and end are
converted to wall-clock nanoseconds through a reference event whose wall-clock time was taken
when it completed (re-anchored every ``ANCHOR_EVERY_S`` so that GPU and host clocks cannot drift
apart for long; recorded on a stream of its own, which no stuck collective holds up). Calls with
``async_op=True`` use the Work's future as on gloo: NCCL completes it when the GPU work is done.

Until its stream reaches a call's start event, the call is only queued (the buffer's
``queued``): a rank whose stream is stuck in an earlier call, or busy computing, is not waiting
in the calls its CPU queued after it, and they are not reported open. Seen on a real GPU: two
ranks whose stream waited in a world all_reduce for a stopped peer had queued 36 more calls on
their pair group, which looked like a hang of the pair group.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from collectors.buffer import T_END, T_ENTER

log = logging.getLogger(__name__)

ANCHOR_EVERY_S = 60.0
#: events kept for reuse per device (two per call in flight)
FREE_EVENTS = 4096
#: streams whose Stream object is kept, per timer (a job uses a handful)
KNOWN_STREAMS = 64


def _event_recorder(torch: Any) -> tuple[Callable[[Any, int], None], Callable[[], int]]:
    """``record(event, device)``, which records an event on the device's current stream, and
    ``current_device()``. torch's ``Event.record()`` asks ``current_stream()``, which builds a
    new Stream object under a device guard on every call: on an H100 host the two records per
    call were most of the hook's CPU cost. Here a stream's Stream object is built once and
    found again by the stream's raw handle. A stand-in torch without those internals (the
    arithmetic tests) records through ``Event.record()``."""
    C = getattr(torch, "_C", None)
    raw_stream = getattr(C, "_cuda_getCurrentRawStream", None)
    get_device = getattr(C, "_cuda_getDevice", None)
    event_base = getattr(C, "_CudaEventBase", None)
    if raw_stream is None or get_device is None or event_base is None:
        return (lambda event, _device: event.record()), torch.cuda.current_device
    base_record, current_stream = event_base.record, torch.cuda.current_stream
    streams: dict[tuple[int, int], Any] = {}

    def record(event: Any, device: int) -> None:
        key = (device, raw_stream(device))
        stream = streams.get(key)
        if stream is None:
            if len(streams) >= KNOWN_STREAMS:
                streams.clear()
            stream = streams[key] = current_stream(device)
        base_record(event, stream)

    return record, get_device


def make_cuda_timer() -> CudaTimer | None:
    """A timer when CUDA is usable in this process, else None (wall-clock timing only)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return CudaTimer()
    except Exception:
        log.debug("CUDA timing unavailable", exc_info=True)
        return None


class CudaTimer:
    """Times synchronous calls with CUDA events; ``poll()`` turns finished ones into rows.

    ``torch_module`` is a seam for the arithmetic tests (a stand-in with ``cuda.Event``,
    ``cuda.current_device`` and ``cuda.device``); in production it is torch.
    """

    def __init__(self, torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module

        self._torch = torch_module
        self._anchors: dict[int, tuple[Any, int, float]] = {}  # device -> (event, wall ns, when)
        self._streams: dict[int, Any] = {}  # device -> the stream anchors are recorded on
        # [device, token, row, start event, end event]: row None once the call raised, end
        # None while the CPU is still inside the call
        self._inflight: list[list] = []
        self._lock = threading.Lock()
        self._buffer: Any = None
        # events whose times were read, for reuse, per device (an event belongs to the device
        # it was first recorded on)
        self._free: dict[int, deque] = {}
        self._record, self._current_device = _event_recorder(torch_module)

    def _take_event(self, device: int) -> Any:
        """An event to record on ``device``: one whose times were read (creating and destroying
        a CUDA event per call costs more than reusing one), else a new one."""
        free = self._free.get(device)
        if free is None:
            free = self._free[device] = deque()
        try:
            return free.pop()
        except IndexError:
            return self._torch.cuda.Event(enable_timing=True)

    def _anchor(self, device: int) -> tuple[Any, int]:
        entry = self._anchors.get(device)
        now = time.monotonic()
        if entry is None or now - entry[2] > ANCHOR_EVERY_S:
            torch = self._torch
            with torch.cuda.device(device):
                stream = self._streams.get(device)
                if stream is None:
                    stream = self._streams[device] = torch.cuda.Stream()
                ev = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    ev.record()
                ev.synchronize()  # once per minute per device, on the shipper thread
                entry = (ev, time.time_ns(), now)
            self._anchors[device] = entry
        return entry[0], entry[1]

    def make_invoke(self, rec: Any, wall_invoke: Callable[..., Any]) -> Callable[..., Any]:
        self._buffer = rec.buf
        pending, queued = rec.buf.pending, rec.buf.queued
        tls, complete = rec._tls, rec.done.complete
        inflight, lock = self._inflight, self._lock
        take, record, current_device = self._take_event, self._record, self._current_device

        def invoke(orig: Callable[..., Any], args: tuple, kwargs: dict, row: tuple, token: int,
                   is_async: bool, st: Any, p2p: bool) -> Any:
            if is_async:
                return wall_invoke(orig, args, kwargs, row, token, is_async, st, p2p)
            device = current_device()
            start = take(device)
            record(start, device)
            queued.add(token)
            pending[token] = row
            item = [device, token, row, start, None]
            inflight.append(item)
            tls.busy = True
            try:
                result = orig(*args, **kwargs)
            except BaseException as exc:
                with lock:  # poll() must not touch the row of a call that failed
                    item[2] = None
                    queued.discard(token)
                    pending.pop(token, None)
                complete(row, time.time_ns(), exc)
                raise
            finally:
                tls.busy = False
            end = take(device)
            record(end, device)
            item[4] = end
            return result

        return invoke

    def poll(self) -> None:
        """On the shipper thread: turn completed event pairs into rows."""
        inflight, buf = self._inflight, self._buffer
        if not inflight or buf is None:
            return
        pending, queued = buf.pending, buf.queued
        with self._lock:
            n = len(inflight)
            items = inflight[:n]
            del inflight[:n]
            keep = []
            for item in items:
                device, token, row, start, end = item
                if row is None:
                    continue
                if end is None or not end.query():
                    keep.append(item)
                    if token in queued and start.query():
                        # the stream has reached the call: the rank waits in it from now on
                        ref, ref_ns = self._anchor(device)
                        arrived = ref_ns + int(ref.elapsed_time(start) * 1e6)
                        pending[token] = (*row[:T_ENTER], max(row[T_ENTER], arrived),
                                          *row[T_ENTER + 1:])
                        queued.discard(token)
                    continue
                ref, ref_ns = self._anchor(device)
                t_start = ref_ns + int(ref.elapsed_time(start) * 1e6)
                t_end = ref_ns + int(ref.elapsed_time(end) * 1e6)
                queued.discard(token)
                pending.pop(token, None)
                # the rank arrived at the call when its stream did: the CPU enqueues calls
                # ahead of the GPU, and its entry says nothing of who was late
                buf.append((*row[:T_ENTER], max(row[T_ENTER], t_start), t_start, t_end,
                            *row[T_END + 1:]))
                free = self._free.get(device)
                if free is not None and len(free) < FREE_EVENTS:
                    free.append(start)
                    free.append(end)
            inflight[:0] = keep
