"""``batch_isend_irecv``: one ``isend`` / ``irecv`` row per ``P2POp`` of the batch.

torch implements the batch by calling ``isend`` / ``irecv`` (the hooked ones) for each op; those
inner calls see the recorder busy and are not recorded again. The rows carry the same per-direction
sequence numbers as plain send/recv, so the k-th message a->b matches on both sides however each
side issued it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from collectors.buffer import RecordBuffer
from collectors.completion import OK, Completion
from collectors.group_state import GroupState, ThreadFlags


class Recording(Protocol):
    """What the wrapper uses of the recorder that installs it (``collectors.hook.Recorder``)."""

    buf: RecordBuffer
    done: Completion
    active: bool
    _tls: ThreadFlags
    _by_key: dict[Any, GroupState]

    def resolve(self, group: Any) -> GroupState: ...

    def measure(self, data: Any) -> tuple[int, int]: ...

    def next_token(self) -> int: ...

    def _prepare_failed(self) -> None: ...


def wrap_batch(rec: Recording, orig: Callable[..., Any]) -> Callable[..., Any]:
    strings = rec.buf.strings
    op_send, op_recv = strings.intern("isend"), strings.intern("irecv")
    tls, pending = rec._tls, rec.buf.pending

    def prepare(p2p_op_list: list) -> list[tuple] | None:
        t_enter = time.time_ns()
        items: list[tuple] = []
        for p in p2p_op_list:
            st = rec._by_key.get(p.group) or rec.resolve(p.group)
            if st.skip:
                return None
            is_send = getattr(p.op, "__name__", "") == "isend"
            peer = int(p.peer) if p.peer is not None else -1
            nbytes, dt = rec.measure(p.tensor)
            key = (is_send, peer)
            seq = st.p2p.get(key, 0)
            st.p2p[key] = seq + 1
            row = (st.idx, seq, op_send if is_send else op_recv, nbytes, dt, t_enter,
                   -1, -1, OK, peer)
            items.append((rec.next_token(), row, st))
        return items

    def hooked(p2p_op_list: list, *args: Any, **kwargs: Any) -> Any:
        if tls.busy or not rec.active:
            return orig(p2p_op_list, *args, **kwargs)
        try:
            items = prepare(p2p_op_list)
        except Exception:
            rec._prepare_failed()
            items = None
        if not items:
            return orig(p2p_op_list, *args, **kwargs)
        entries = tuple((token, row) for token, row, _ in items)
        for token, row in entries:
            pending[token] = row
        tls.busy = True
        try:
            works = orig(p2p_op_list, *args, **kwargs)
        except BaseException as exc:
            rec.done.finish(entries, time.time_ns(), exc)
            raise
        finally:
            tls.busy = False
        try:
            _track_all(rec, works, items, entries)
        except Exception:
            rec._prepare_failed()
        return works

    return hooked


def _track_all(rec: Recording, works: Any, items: list[tuple], entries: tuple) -> None:
    works = [w for w in (works or []) if w is not None]
    if not works:
        rec.done.finish(entries, time.time_ns(), None)
    elif len(works) == len(items):  # one Work per op (gloo)
        for work, entry, (_, _, st) in zip(works, entries, items, strict=True):
            rec.done.track(work, (entry,), st)
    else:  # coalesced into one Work (NCCL): it completes every op of the batch
        rec.done.track(works[-1], entries, items[0][2])
