"""How a recorded call's row is completed: at once, from a Work's future, or at Work.wait().

Completion of an ``async_op=True`` call is taken from its Work's future when the backend has one
(NCCL; gloo for most collectives). gloo's send/recv and reduce_scatter Works have no future (and
send/recv report completion to nobody: ``is_completed()`` stays False until someone waits), so for
those ops, and for every async call when ``future_timing`` is off, the hooked ``Work.wait``
records the time at which the program's wait returned: an upper bound of the true end.
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


class Completion:
    """Turns a pending row into a completed one (ok, timeout or error) in the buffer."""

    def __init__(self, buffer: RecordBuffer, future_timing: bool = True) -> None:
        self.buf = buffer
        # False: async calls complete when the program's Work.wait() returns (cheaper, later)
        self.future_timing = future_timing
        self._waiting: dict[int, tuple] = {}   # id(work) -> (work, ((token, row), ...))

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

    def track(self, work: Any, entries: tuple, st: Any) -> None:
        """Arrange for the completion of an async call's Work to be recorded.

        ``entries``: the (token, row) pairs that this Work completes (several for a coalesced
        ``batch_isend_irecv``).
        """
        op = entries[0][1][2]
        if self.future_timing and op not in st.no_future:
            try:
                fut = work.get_future()
            except Exception:
                # gloo: send/recv and reduce_scatter Works have none; use the hooked wait
                st.no_future.add(op)
            else:
                # add_done_callback, not then(): no chained Future to build (~0.6 µs less)
                fut.add_done_callback(functools.partial(self.on_future, entries))
                return
        self._waiting[id(work)] = (work, entries)

    def wrap_wait(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        waiting, finish = self._waiting, self.finish

        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            entry = waiting.pop(id(work), None)
            if entry is None:
                return orig(work, *args, **kwargs)
            try:
                done = orig(work, *args, **kwargs)
            except BaseException as exc:
                finish(entry[1], time.time_ns(), exc)
                raise
            if done is False:  # a wait with a timeout that ran out: still pending
                waiting[id(work)] = entry
                return done
            finish(entry[1], time.time_ns(), None)
            return done

        functools.update_wrapper(wait, orig)
        return wait
