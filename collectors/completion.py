"""How a recorded call's row is completed: at once, when its Work is seen done, or by a future.

``async_op=True`` calls complete in one of these ways (``C4_ASYNC_TIMING``):

- ``future``: a done-callback on the Work's future for every call. Exact, but ~10 µs of CPU
  per call on gloo (~3 µs in torch's ``add_done_callback`` alone, and the callback contends for
  the GIL from gloo's thread).
- ``poll``: the end is the first moment the collector sees the Work complete, at whichever
  comes first of: the program's ``Work.wait()`` returning (exact when the program waited
  before the call finished), the program's ``is_completed()`` returning True, the next
  recorded call on any thread, and the shipper thread's poll (every ``C4_POLL_INTERVAL``, kept
  up for a second after outstanding Works were last seen). ~0.5 µs per call more than a
  synchronous call, plus the poller's ~1-2 % of a core while async calls are in flight.
- ``auto`` (default): ``future`` while the program makes few async calls (below ~1,000/s the
  callbacks cost less CPU in total than the poller, and are exact), ``poll`` above ~2,000/s;
  the shipper measures the rate every cycle.
- ``wait``: the return of the program's ``Work.wait()`` (an upper bound; never polled).

In every mode, a Work whose future the program takes (``get_future()``: DDP's comm hook,
futures code) gets the exact callback, and so do async calls on groups timed with CUDA events
(NCCL: completed by the GPU; the shipper must not call their ``wait()``). gloo's send/recv and
reduce_scatter Works have no future, and send/recv report completion to nobody
(``is_completed()`` stays False until someone waits): their end is when the program's
``Work.wait()`` returned.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from typing import Any

from collectors.buffer import RecordBuffer

OK, TIMEOUT, ERROR = 0, 1, 2
_TIMEOUT_RE = re.compile(r"time[sd]?[ _-]?out", re.IGNORECASE)


def classify(exc: BaseException) -> tuple[int, str]:
    """(status, text) for an exception raised by a call or its completion.

    A RuntimeError that mentions a timeout ("timeout", "timed out") is a timeout.
    """
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, RuntimeError) and _TIMEOUT_RE.search(str(exc)):
        return TIMEOUT, text
    return ERROR, text


MODES = ("auto", "poll", "future", "wait")
# ``auto``: async calls per second above which polling is cheaper than a callback per call
# (poller ~10-20 ms of CPU per second vs ~10 µs per callback), and below which it goes back.
AUTO_POLL_ABOVE = 2000.0
AUTO_FUTURE_BELOW = 1000.0
AUTO_RATE_WINDOW_S = 0.5


class Completion:
    """Turns a pending row into a completed one (ok, timeout or error) in the buffer."""

    def __init__(self, buffer: RecordBuffer, mode: str = "auto") -> None:
        self.buf = buffer
        self.async_calls = 0  # counted without a lock: only a rate estimate for ``auto``
        self._rate_n, self._rate_t = 0, time.monotonic()
        self.mode = mode
        # id(work) -> (work, ((token, row), ...)): async calls not seen complete yet. Written by
        # the calling threads and the shipper: only single atomic dict operations on it.
        self._waiting: dict[int, tuple] = {}
        self._get_future: Callable[[Any], Any] = lambda work: work.get_future()
        self._wait: Callable[[Any], Any] = lambda work: work.wait()

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"async timing {mode!r}: use one of {', '.join(MODES)}")
        self._mode = mode
        # read by the hooks on every async call; ``adapt()`` flips it in ``auto``
        self.future_timing = mode in ("future", "auto")
        self.polling = mode in ("poll", "auto")

    def adapt(self) -> None:
        """``auto``: callbacks or polling, from the async call rate since the last look."""
        if self._mode != "auto":
            return
        now, n = time.monotonic(), self.async_calls
        if now - self._rate_t < AUTO_RATE_WINDOW_S:
            return
        rate = (n - self._rate_n) / (now - self._rate_t)
        self._rate_n, self._rate_t = n, now
        if self.future_timing and rate > AUTO_POLL_ABOVE:
            self.future_timing = False
        elif not self.future_timing and rate < AUTO_FUTURE_BELOW:
            self.future_timing = True

    def complete(self, row: tuple, t_end: int, exc: BaseException | None) -> None:
        if exc is None:
            self.buf.append((*row[:7], t_end, OK, row[9]))
        else:
            status, text = classify(exc)
            self.buf.append((*row[:7], t_end, status, row[9]), text)

    def on_future(self, entries: tuple, fut: Any) -> None:
        t_end = time.time_ns()
        exc: BaseException | None = None
        try:
            fut.value()
        except BaseException as err:  # the call failed; record it, never re-raise here
            exc = err
        self.finish(entries, t_end, exc)

    def finish(self, entries: tuple, t_end: int, exc: BaseException | None) -> None:
        pending = self.buf.pending
        for token, row in entries:
            pending.pop(token, None)
            self.complete(row, t_end, exc)

    def outstanding(self) -> bool:
        """Async calls that polling should complete are waiting (not while callbacks do it:
        then only Works without a future wait here, which a poll cannot complete)."""
        return self.polling and not self.future_timing and bool(self._waiting)

    def poll(self) -> int:
        """Complete every waiting Work that has finished (its end: now, first seen done).

        Returns how many Works were waiting.
        """
        if not self.polling:
            return 0
        waiting = self._waiting
        items = list(waiting.items())
        for key, (work, _) in items:
            try:
                if not work.is_completed():
                    continue
            except Exception:
                continue
            self._seen_done(key, work)
        return len(items)

    def _seen_done(self, key: int, work: Any) -> None:
        t_end = time.time_ns()
        entry = self._waiting.pop(key, None)
        if entry is None:  # another thread saw it first
            return
        exc: BaseException | None = None
        try:
            self._wait(work)  # returns at once on a finished Work, or raises its error
        except BaseException as err:  # (Work.exception() is deprecated and warns)
            exc = err
        self.finish(entry[1], t_end, exc)

    def track(self, work: Any, entries: tuple, st: Any) -> None:
        """Arrange for the completion of an async call's Work to be recorded.

        ``entries``: the (token, row) pairs that this Work completes (several for a coalesced
        ``batch_isend_irecv``).
        """
        self.async_calls += 1
        op = entries[0][1][2]
        # Groups timed with CUDA events (NCCL) keep the future, completed by the GPU, unless
        # told "wait": the shipper must not call wait() on them (it syncs CUDA streams).
        exact = self.future_timing or (self.polling and getattr(st, "invoke", None) is not None)
        if exact and op not in st.no_future:
            try:
                fut = self._get_future(work)
            except Exception:
                # gloo: send/recv and reduce_scatter Works have none; use the hooked wait
                st.no_future.add(op)
            else:
                # add_done_callback, not then(): no chained Future to build (~0.6 µs less)
                fut.add_done_callback(functools.partial(self.on_future, entries))
                return
        self._waiting[id(work)] = (work, entries)

    def wrap_is_completed(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        waiting, seen_done = self._waiting, self._seen_done

        def is_completed(work: Any) -> Any:
            done = orig(work)
            if done and waiting and id(work) in waiting:
                seen_done(id(work), work)
            return done

        functools.update_wrapper(is_completed, orig)
        return is_completed

    def wrap_get_future(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """A program that takes the Work's future gets the exact (callback) end for it."""
        waiting, on_future = self._waiting, self.on_future
        self._get_future = orig

        def get_future(work: Any) -> Any:
            fut = orig(work)
            if waiting:
                entry = waiting.pop(id(work), None)
                if entry is not None:
                    fut.add_done_callback(functools.partial(on_future, entry[1]))
            return fut

        functools.update_wrapper(get_future, orig)
        return get_future

    def wrap_wait(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        waiting, finish = self._waiting, self.finish
        buf = self.buf
        rows, pending, cap = buf.rows, buf.pending, buf.capacity
        half = cap // 2
        time_ns = time.time_ns
        self._wait = orig

        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            entry = waiting.pop(id(work), None)
            if entry is None:
                return orig(work, *args, **kwargs)
            try:
                done = orig(work, *args, **kwargs)
            except BaseException as exc:
                finish(entry[1], time_ns(), exc)
                raise
            t_end = time_ns()
            if done is False:  # a wait with a timeout that ran out: still pending
                waiting[id(work)] = entry
                return done
            entries = entry[1]
            if len(entries) != 1:
                finish(entries, t_end, None)
                return done
            # one row, completed ok: finish() and RecordBuffer.append() inlined (hot path)
            token, row = entries[0]
            pending.pop(token, None)
            if len(rows) < cap:
                rows.append((*row[:7], t_end, OK, row[9]))
                if len(rows) == half:
                    buf.wake.set()
            else:
                buf.dropped_full += 1
            return done

        functools.update_wrapper(wait, orig)
        return wait
